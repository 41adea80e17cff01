// The JavaScript clients of the client matrix (tests/test_clients.py), each set up as its README says: a base URL
// and a key. Reads `CLIENT CASE URL` lines on stdin and answers each with a line
// `RESULT {"answer": ..., "cities": [...]}` (or `RESULT {"error": ...}`), as tests/venv_clients.py does.
// It also reads a replayed AI SDK UI message stream with the `ai` package's reader (tests/test_ai_sdk_ui.py), and
// makes an MCP session with @modelcontextprotocol/sdk (mcp_client.mjs, tests/test_mcp_clients.py).
import * as readline from "node:readline";

import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import Anthropic from "@anthropic-ai/sdk";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import { GoogleGenAI } from "@google/genai";
import {
  generateText,
  isStepCount,
  jsonSchema,
  parseJsonEventStream,
  readUIMessageStream,
  streamText,
  tool,
  uiMessageChunkSchema,
} from "ai";
import { EventSource } from "eventsource";
import { EventSourceParserStream } from "eventsource-parser/stream";
import OpenAI from "openai";

import { mcpSession } from "./mcp_client.mjs";

const QUESTION = "What's the weather in Tokyo?";
const GREETING = "Hello!";
const LIMIT = 6;
const DESCRIPTION = "Get weather for a city";
const SCHEMA = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const MODELS = { chat: "local-model", responses: "claude-sonnet-4-20250514", messages: "claude-sonnet-4-6", gemini: "gemini-2.5-flash" };

let cities = [];
function getWeather({ city }) {
  cities.push(city);
  return JSON.stringify({ city, temperature_c: 18, conditions: "light rain" });
}
function call(name, args) {
  if (name !== "get_weather") throw new Error(`the model called ${name}, which was never offered`);
  return getWeather(typeof args === "string" ? JSON.parse(args) : args);
}
function noAnswer() {
  throw new Error(`no answer after ${LIMIT} model calls`);
}

// openai: chat completions and the Responses API.
const CHAT_TOOLS = [{ type: "function", function: { name: "get_weather", description: DESCRIPTION, parameters: SCHEMA } }];
const RESPONSES_TOOLS = [{ type: "function", name: "get_weather", description: DESCRIPTION, parameters: SCHEMA }];

async function openaiChat(url, c) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test" });
  const greeting = [{ role: "user", content: GREETING }];
  if (c === "stream") {
    let text = "";
    for await (const chunk of await client.chat.completions.create({ model: MODELS.chat, messages: greeting, stream: true }))
      text += chunk.choices[0]?.delta?.content ?? "";
    return text;
  }
  if (c === "plain") return (await client.chat.completions.create({ model: MODELS.chat, messages: greeting })).choices[0].message.content;
  const messages = [{ role: "user", content: QUESTION }];
  for (let i = 0; i < LIMIT; i++) {
    let message;
    if (c === "streamed_loop") {
      const stream = client.chat.completions.stream({ model: MODELS.chat, messages, tools: CHAT_TOOLS });
      message = (await stream.finalChatCompletion()).choices[0].message;
    } else {
      message = (await client.chat.completions.create({ model: MODELS.chat, messages, tools: CHAT_TOOLS })).choices[0].message;
    }
    if (!message.tool_calls?.length) return message.content;
    messages.push(message);
    for (const tc of message.tool_calls)
      messages.push({ role: "tool", tool_call_id: tc.id, content: call(tc.function.name, tc.function.arguments) });
  }
  noAnswer();
}

async function openaiResponses(url, c) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test" });
  if (c === "stream") {
    let text = "";
    for await (const event of await client.responses.create({ model: MODELS.responses, input: GREETING, stream: true }))
      if (event.type === "response.output_text.delta") text += event.delta;
    return text;
  }
  if (c === "plain") return (await client.responses.create({ model: MODELS.responses, input: GREETING })).output_text;
  const input = [{ role: "user", content: QUESTION }];
  for (let i = 0; i < LIMIT; i++) {
    const response =
      c === "streamed_loop"
        ? await client.responses.stream({ model: MODELS.responses, input, tools: RESPONSES_TOOLS }).finalResponse()
        : await client.responses.create({ model: MODELS.responses, input, tools: RESPONSES_TOOLS });
    const calls = response.output.filter((item) => item.type === "function_call");
    if (!calls.length) return response.output_text;
    input.push(...response.output);
    for (const fc of calls) input.push({ type: "function_call_output", call_id: fc.call_id, output: call(fc.name, fc.arguments) });
  }
  noAnswer();
}

// @anthropic-ai/sdk: messages, its stream helper and its tool runner.
const ANTHROPIC_TOOLS = [{ name: "get_weather", description: DESCRIPTION, input_schema: SCHEMA }];
const textOf = (content) => content.filter((b) => b.type === "text").map((b) => b.text).join("");

async function anthropic(url, c) {
  const client = new Anthropic({ baseURL: url, apiKey: "sk-ant-test" });
  const base = { model: MODELS.messages, max_tokens: 1024 };
  if (c === "stream") {
    let text = "";
    for await (const event of await client.messages.create({ ...base, messages: [{ role: "user", content: GREETING }], stream: true }))
      if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
    return text;
  }
  if (c === "plain") return textOf((await client.messages.create({ ...base, messages: [{ role: "user", content: GREETING }] })).content);
  const messages = [{ role: "user", content: QUESTION }];
  for (let i = 0; i < LIMIT; i++) {
    const message =
      c === "streamed_loop"
        ? await client.messages.stream({ ...base, messages, tools: ANTHROPIC_TOOLS }).finalMessage()
        : await client.messages.create({ ...base, messages, tools: ANTHROPIC_TOOLS });
    if (message.stop_reason !== "tool_use") return textOf(message.content);
    messages.push({ role: "assistant", content: message.content });
    messages.push({
      role: "user",
      content: message.content
        .filter((b) => b.type === "tool_use")
        .map((b) => ({ type: "tool_result", tool_use_id: b.id, content: call(b.name, b.input) })),
    });
  }
  noAnswer();
}

async function anthropicRunner(url, c) {
  const client = new Anthropic({ baseURL: url, apiKey: "sk-ant-test" });
  const weather = betaTool({ name: "get_weather", description: DESCRIPTION, inputSchema: SCHEMA, run: getWeather });
  const runner = client.beta.messages.toolRunner({
    model: MODELS.messages,
    max_tokens: 1024,
    max_iterations: LIMIT,
    messages: [{ role: "user", content: QUESTION }],
    tools: [weather],
    stream: c === "streamed_loop",
  });
  return textOf((await runner).content);
}

// @google/genai.
async function genai(url, c) {
  const client = new GoogleGenAI({ apiKey: "test-key", httpOptions: { baseUrl: url } });
  if (c === "stream") {
    let text = "";
    for await (const chunk of await client.models.generateContentStream({ model: MODELS.gemini, contents: GREETING }))
      text += chunk.text ?? "";
    return text;
  }
  if (c === "plain") return (await client.models.generateContent({ model: MODELS.gemini, contents: GREETING })).text;
  const config = { tools: [{ functionDeclarations: [{ name: "get_weather", description: DESCRIPTION, parametersJsonSchema: SCHEMA }] }] };
  const contents = [{ role: "user", parts: [{ text: QUESTION }] }];
  for (let i = 0; i < LIMIT; i++) {
    let reply;
    if (c === "streamed_loop") {
      const parts = [];
      for await (const chunk of await client.models.generateContentStream({ model: MODELS.gemini, contents, config }))
        parts.push(...(chunk.candidates?.[0]?.content?.parts ?? []));
      reply = { parts, calls: parts.filter((p) => p.functionCall).map((p) => p.functionCall) };
    } else {
      const response = await client.models.generateContent({ model: MODELS.gemini, contents, config });
      reply = { parts: response.candidates[0].content.parts, calls: response.functionCalls ?? [] };
    }
    if (!reply.calls.length) return reply.parts.filter((p) => p.text && !p.thought).map((p) => p.text).join("");
    contents.push({ role: "model", parts: reply.parts });
    contents.push({
      role: "user",
      parts: reply.calls.map((fc) => ({ functionResponse: { name: fc.name, response: { result: JSON.parse(call(fc.name, fc.args)) } } })),
    });
  }
  noAnswer();
}

// The Vercel AI SDK, with its OpenAI (Responses by default, and chat), Anthropic and Google providers.
function aiModel(api, url) {
  if (api === "chat") return createOpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test" }).chat(MODELS.chat);
  if (api === "responses") return createOpenAI({ baseURL: `${url}/v1`, apiKey: "sk-test" })(MODELS.responses);
  if (api === "messages") return createAnthropic({ baseURL: `${url}/v1`, apiKey: "sk-ant-test" })(MODELS.messages);
  return createGoogleGenerativeAI({ baseURL: `${url}/v1beta`, apiKey: "test-key" })(MODELS.gemini);
}

async function vercel(api, url, c) {
  const model = aiModel(api, url);
  if (c === "stream") {
    let text = "";
    for await (const delta of streamText({ model, prompt: GREETING }).textStream) text += delta;
    return text;
  }
  if (c === "plain") return (await generateText({ model, prompt: GREETING })).text;
  const tools = { get_weather: tool({ description: DESCRIPTION, inputSchema: jsonSchema(SCHEMA), execute: getWeather }) };
  const options = { model, prompt: QUESTION, tools, stopWhen: isStepCount(LIMIT) };
  if (c === "streamed_loop") {
    const result = streamText(options);
    for await (const _ of result.textStream);
    return await result.text;
  }
  return (await generateText(options)).text;
}

// eventsource and eventsource-parser, reading the chat stream themselves.
function chatRequest(url) {
  return [
    `${url}/v1/chat/completions`,
    {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer sk-test" },
      body: JSON.stringify({ model: MODELS.chat, messages: [{ role: "user", content: GREETING }], stream: true }),
    },
  ];
}
const deltaOf = (data) => JSON.parse(data).choices[0]?.delta?.content ?? "";

function eventsource(url) {
  const [address, init] = chatRequest(url);
  return new Promise((resolve, reject) => {
    let text = "";
    const source = new EventSource(address, { fetch: (input, given) => fetch(input, { ...given, ...init, headers: { ...given.headers, ...init.headers } }) });
    source.onmessage = (event) => {
      if (event.data === "[DONE]") {
        source.close();
        resolve(text);
      } else text += deltaOf(event.data);
    };
    source.onerror = (error) => {
      source.close();
      reject(new Error(`EventSource failed: ${error.message ?? error.type}`));
    };
  });
}

async function eventsourceParser(url) {
  const response = await fetch(...chatRequest(url));
  let text = "";
  for await (const event of response.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream()))
    if (event.data !== "[DONE]") text += deltaOf(event.data);
  return text;
}

// The AI SDK's UI message stream, read as `useChat`'s transport reads it (its parts checked against the SDK's own
// schema, then put together by readUIMessageStream): the URL is the chat route's; the case is the fault to ask
// for, or `whole`. The answer is the last message, the errors the reader reported, and the stream's header.
async function uiMessageStream(url, fault) {
  const headers = { "content-type": "application/json", ...(fault === "whole" ? {} : { "x-sse-tape-fault": fault }) };
  const parts = [{ type: "text", text: QUESTION }];
  const body = JSON.stringify({ id: "chat-1", messages: [{ id: "u1", role: "user", parts }], trigger: "submit-message" });
  const response = await fetch(url, { method: "POST", headers, body });
  const chunks = parseJsonEventStream({ stream: response.body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(part, controller) {
        if (!part.success) throw part.error;
        controller.enqueue(part.value);
      },
    }),
  );
  const errors = [];
  let message;
  for await (const snapshot of readUIMessageStream({ stream: chunks, onError: (error) => errors.push(String(error?.message ?? error)) }))
    message = snapshot;
  return { message, errors, header: response.headers.get("x-vercel-ai-ui-message-stream") };
}

const CLIENTS = {
  "js-openai-chat": (url, c) => openaiChat(url, c),
  "js-openai-responses": (url, c) => openaiResponses(url, c),
  "js-anthropic": (url, c) => anthropic(url, c),
  "js-anthropic-tool-runner": (url, c) => anthropicRunner(url, c),
  "js-google-genai": (url, c) => genai(url, c),
  "ai-sdk-openai-chat": (url, c) => vercel("chat", url, c),
  "ai-sdk-openai-responses": (url, c) => vercel("responses", url, c),
  "ai-sdk-anthropic": (url, c) => vercel("messages", url, c),
  "ai-sdk-google": (url, c) => vercel("gemini", url, c),
  "js-eventsource": (url) => eventsource(url),
  "js-eventsource-parser": (url) => eventsourceParser(url),
  "ai-sdk-ui-reader": (url, c) => uiMessageStream(url, c),
  "js-mcp": (url, c) => mcpSession(url, c),
};

for await (const line of readline.createInterface({ input: process.stdin })) {
  const [client, c, url] = line.split(" ");
  cities = [];
  let result;
  try {
    result = { answer: await CLIENTS[client](url, c), cities };
  } catch (error) {
    result = { error: String(error?.stack ?? error) };
  }
  // A client may print what it likes: the result is the line that starts with RESULT.
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}
