// The JS SDK's A2A 0.3 clients (@a2a-js/sdk 0.3.14: JsonRpcTransport, RestTransport)
// running one fixed script against an agent; one JSON line per scenario on stdout:
//   {"scenario": NAME, "result": ...}  or  {"scenario": NAME, "error": {"type", "message"}}
// Usage: node drive03.mjs BASE_URL jsonrpc|rest [API_KEY]
// Installed by `make peer` (npm, into node_modules here); never part of the gateway.
import { JsonRpcTransport, RestTransport } from "@a2a-js/sdk/client";
import { randomUUID } from "node:crypto";

const [base, binding, key] = process.argv.slice(2);
const TIMEOUT_MS = 15000;
const headers = key ? { "X-API-Key": key } : {};
const fetchImpl = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...(init.headers ?? {}), ...headers }, signal: AbortSignal.timeout(TIMEOUT_MS) });

const emit = (line) => process.stdout.write(JSON.stringify(line) + "\n");
async function step(scenario, call) {
  try {
    const result = await call();
    emit({ scenario, result });
    return result;
  } catch (error) {
    emit({ scenario, error: { type: error?.constructor?.name ?? "Error", message: String(error?.message ?? error) } });
    return undefined;
  }
}
const message = (text, extra = {}) => ({
  kind: "message", role: "user", messageId: randomUUID(), parts: [{ kind: "text", text }], ...extra,
});
async function collect(events) {
  const out = [];
  for await (const event of events) out.push(event);
  return out;
}

const card = await (await fetchImpl(`${base}/.well-known/agent-card.json`)).json();
const endpoint = binding === "rest"
  ? card.additionalInterfaces.find((i) => i.transport === "HTTP+JSON").url
  : card.url;
const transport = binding === "rest"
  ? new RestTransport({ endpoint, fetchImpl })
  : new JsonRpcTransport({ endpoint, fetchImpl });

const sent = await step("send", () => transport.sendMessage({ message: message("hello js 0.3"), configuration: { blocking: true } }));
// No configuration at all: 0.3 JSON-RPC blocks, 0.3 HTTP+JSON (proto3 bool) does not.
const absent = await step("send-absent", () => transport.sendMessage({ message: message(binding === "rest" ? "hold:30" : "hello absent") }));
if (binding === "rest" && absent?.id) await step("send-absent-cancel", () => transport.cancelTask({ id: absent.id }));
await step("stream", () => collect(transport.sendMessageStream({ message: message("chunks:3") })));
await step("stream-ask", () => collect(transport.sendMessageStream({ message: message("ask:Which colour?") })));
const blocking = { blocking: true };
const asked = await step("ask", () => transport.sendMessage({ message: message("ask:What colour?"), configuration: blocking }));
if (asked?.id) {
  const answer = message("blue", { taskId: asked.id, contextId: asked.contextId });
  await step("answer", () => transport.sendMessage({ message: answer, configuration: blocking }));
}
if (sent?.id) {
  await step("get", () => transport.getTask({ id: sent.id, historyLength: 10 }));
  const config = { taskId: sent.id, pushNotificationConfig: { id: "js-1", url: "https://example.com/hook", token: "t0k" } };
  await step("push-set", () => transport.setTaskPushNotificationConfig(config));
  await step("push-get", () => transport.getTaskPushNotificationConfig({ id: sent.id, pushNotificationConfigId: "js-1" }));
  await step("push-list", () => transport.listTaskPushNotificationConfig({ id: sent.id }));
  await step("push-delete", async () => {
    await transport.deleteTaskPushNotificationConfig({ id: sent.id, pushNotificationConfigId: "js-1" });
    return { deleted: true };
  });
}
const held = await step("send-nonblocking", () => transport.sendMessage({ message: message("hold:30"), configuration: { blocking: false } }));
if (held?.id) {
  await step("cancel", () => transport.cancelTask({ id: held.id }));
}
await step("missing-task", () => transport.getTask({ id: randomUUID() }));
