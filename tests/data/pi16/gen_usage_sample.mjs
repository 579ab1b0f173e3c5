#!/usr/bin/env node
// Writes tests/data/pi16/usage-sample.jsonl with pi 1.6.0's own SessionManager: the usage
// that pi 1.6 counts beyond assistant replies (a `usage` entry, a compaction's and a branch
// summary's `usage`, a tool result's `usage`), the entry types 1.6 added (`usage`,
// `context_edit`, role "system" messages) and the new message fields, under a custom
// session id. Ids and timestamps are pi's own (random): the file is committed as written.
//
//   .peers/node22/bin/node tests/data/pi16/gen_usage_sample.mjs   # after scripts/peers/setup
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const peers = process.env.SESSIONTREE_PEERS || path.join(root, ".peers");
const home = fs.mkdtempSync(path.join(os.tmpdir(), "gen-usage-sample-"));
process.env.HOME = home;
process.env.PI_CODING_AGENT_DIR = path.join(home, "agent");
const sm_js = path.join(peers, "pi16/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js");
const { SessionManager } = await import(pathToFileURL(sm_js).href);

const usage = (input, output, cacheRead, cacheWrite, total, extra = {}, costExtra = {}) => ({
	input,
	output,
	cacheRead,
	cacheWrite,
	...extra,
	totalTokens: input + output + cacheRead + cacheWrite,
	cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total, ...costExtra },
});
const t0 = 1795000000000;
const sm = SessionManager.create("/work/demo", path.join(home, "sessions"), { id: "usage-sample.pi16" });
sm.appendMessage({
	role: "system",
	content: "",
	sections: { identity: "You are a coding agent.", rules: "Be brief." },
	toolsAdded: [{ name: "read", description: "Read a file" }],
	timestamp: t0,
});
const u1 = sm.appendMessage({ role: "user", content: [{ type: "text", text: "Read notes.txt" }], timestamp: t0 + 1000 });
sm.appendMessage({
	role: "assistant",
	content: [
		{ type: "thinking", thinking: "Read it." },
		{ type: "toolCall", id: "call_1", name: "read", arguments: { path: "notes.txt" } },
	],
	api: "anthropic-messages",
	provider: "anthropic",
	model: "claude-sonnet-4-5",
	usage: usage(5000, 500, 2500, 0, 0.021, { cacheWrite1h: 0, reasoning: 120 }, { totalFromProvider: true }),
	stopReason: "toolUse",
	thinkingLevel: "medium",
	providerThinkingLevel: "high",
	rawStopReason: "tool_use",
	durationMs: 2300,
	timestamp: t0 + 2000,
});
sm.appendMessage({
	role: "toolResult",
	toolCallId: "call_1",
	toolName: "read",
	content: [{ type: "text", text: "remember the milk" }],
	isError: false,
	usage: usage(500, 100, 2000, 0, 0.003),
	nestedCalls: [{ toolName: "grep", arguments: { pattern: "milk" }, isError: false }],
	durationMs: 41,
	addedToolNames: ["grep"],
	timestamp: t0 + 3000,
});
const a2 = sm.appendMessage({
	role: "assistant",
	content: [{ type: "text", text: "It says: remember the milk." }],
	api: "anthropic-messages",
	provider: "anthropic",
	model: "claude-sonnet-4-5",
	usage: usage(3000, 300, 1500, 0, 0.0126),
	stopReason: "stop",
	endTurn: true,
	durationMs: 1800,
	timestamp: t0 + 4000,
});
sm.appendUsage("cache_warm", "anthropic", "claude-sonnet-4-5", usage(0, 0, 40000, 0, 0.012, { cacheWrite1h: 0 }), "kept the prompt cache warm");
sm.appendContextEdit(u1, { content: [{ type: "text", text: "Read notes.txt (edited)" }] });
sm.appendCompaction("Read notes.txt: remember the milk.", a2, 9000, undefined, undefined, usage(1500, 200, 5000, 0, 0.008));
sm.appendMessage({ role: "user", content: [{ type: "text", text: "Anything else?" }], timestamp: t0 + 6000 });
sm.appendMessage({
	role: "assistant",
	content: [],
	api: "openai-responses",
	provider: "openai",
	model: "gpt-5",
	usage: usage(0, 0, 0, 0, 0),
	stopReason: "deferred",
	deferred: true,
	timestamp: t0 + 7000,
});
sm.branchWithSummary(a2, "Asked about something else; nothing found.", undefined, undefined, usage(800, 120, 3000, 0, 0.005));
const out = path.join(path.dirname(new URL(import.meta.url).pathname), "usage-sample.jsonl");
fs.copyFileSync(sm.getSessionFile(), out);
fs.rmSync(home, { recursive: true, force: true });
console.log(out);
