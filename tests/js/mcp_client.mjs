// An MCP client as @modelcontextprotocol/sdk's README sets one up: a `Client` over `StreamableHTTPClientTransport`
// to the server's endpoint. One whole session against docs/mcp.md's tools.py (tests/test_mcp_clients.py): connect
// (initialize), list the tools, call `add` and `count` (with progress), in the order the case names
// (`add-first`, `count-first`: their JSON-RPC ids differ), then end the session (DELETE). What it got is plain
// JSON: clients.mjs runs it as its `js-mcp` client, and `node mcp_client.mjs URL [ORDER]` prints it.
import { pathToFileURL } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export async function mcpSession(url, order = "add-first") {
  const client = new Client({ name: "sse-tape-node", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  try {
    const progress = [];
    const add = () => client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
    const count = () =>
      client.callTool({ name: "count", arguments: { n: 3 } }, undefined, {
        onprogress: ({ progress: done, total, message }) => progress.push([done, total, message]),
      });
    const { tools } = await client.listTools();
    let added, counted;
    if (order === "count-first") {
      counted = await count();
      added = await add();
    } else {
      added = await add();
      counted = await count();
    }
    await transport.terminateSession();
    return {
      version: transport.protocolVersion,
      server: client.getServerVersion().name,
      tools: tools.map((tool) => [tool.name, tool.description]),
      added: [added.structuredContent, added.isError],
      counted: [counted.structuredContent, counted.isError],
      progress,
    };
  } finally {
    await client.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href)
  process.stdout.write(`${JSON.stringify(await mcpSession(process.argv[2], process.argv[3]))}\n`);
