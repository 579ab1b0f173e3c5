#!/usr/bin/env node
/**
 * pi as an oracle: what pi's own SessionManager (dist/core/session-manager.js) makes of a
 * session file, or writes for an op script. One script for both pi releases the tests use:
 * $SESSIONTREE_PEER_DIR is the npm project pi is installed in (scripts/peers/setup:
 * .peers/pi for 0.73.1, run by node >= 20; .peers/pi16 for 1.6.0, run by .peers/node22).
 * scripts/peers/oracle chooses both; so does tests/peers.py.
 *
 *   context FILE [--leaf ID | --null-leaf | --all-leaves] [--in-place]
 *   tree FILE [--flat] [--in-place]
 *   run OPS.json OUTDIR [--json] [--skip-unsupported] [--cwd DIR]
 *   bench load|context|append|list|tree ...
 *   entries FILE [--in-place]        {"header","entries","leafId","name"}
 *   llm FILE [--leaf ID | --all-leaves]   convertToLlm(context messages) (pi 1.6)
 *   usage FILE                       the token/cost totals pi 1.6's session stats sum
 *   projection FILE [--leaf ID]      buildSessionProjection(): entry -> message count (pi 1.6)
 *   list DIR | listall AGENT_DIR     SessionManager.listAll (pi 1.6)
 *   append FILE                      open FILE in place and append one user message
 *
 * Every command that reads a FILE opens a private copy (pi may migrate or repair a file
 * when it opens it) unless --in-place. HOME and PI_CODING_AGENT_DIR point at a private temp
 * dir before pi is imported (pi reads them lazily), so nothing lands in the real ~/.pi.
 * Exit codes: 0 ok, 1 pi threw, 2 usage, 3 an op of `run` threw.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { bench, dieWith, out, parseArgs, privateCopy, privateRoot, readOps, runOps, splitModel, treeJson } from "./common.mjs";

const die = dieWith("pi-oracle");
const projectDir = process.env.SESSIONTREE_PEER_DIR || die("SESSIONTREE_PEER_DIR is not set (run this through scripts/peers/oracle)");
const PACKAGES = { "@earendil-works/pi-coding-agent": "pi16", "@mariozechner/pi-coding-agent": "pi" };
const pkg = Object.keys(PACKAGES).find((p) => fs.existsSync(path.join(projectDir, "node_modules", p, "package.json")));
if (!pkg) die(`no pi in ${projectDir} (scripts/peers/setup installs it)`);
const peerName = process.env.SESSIONTREE_PEER_NAME || PACKAGES[pkg];
const core = path.join(projectDir, "node_modules", pkg, "dist", "core");

const { positional, flags } = parseArgs(process.argv.slice(2), die);
const [cmd, ...rest] = positional;

const root = privateRoot(`${peerName}-oracle-`);
process.env.HOME = path.join(root, "home");
process.env.PI_CODING_AGENT_DIR = cmd === "listall" ? path.resolve(rest[0] ?? die("listall AGENT_DIR")) : path.join(root, "agent");
const importCore = (name) => import(pathToFileURL(path.join(core, name)).href);
const { SessionManager } = await importCore("session-manager.js");

function open(file) {
	if (flags.has("--in-place")) {
		if (!fs.existsSync(file)) die(`no such file: ${file}`);
		return SessionManager.open(file);
	}
	const copy = privateCopy(root, file, die);
	return SessionManager.open(copy, path.dirname(copy));
}

function leafAt(sm) {
	if (flags.has("--null-leaf")) sm.resetLeaf();
	else if (flags.has("--leaf")) sm.branch(flags.get("--leaf"));
	return sm;
}

/** Every entry, in file order, as the leaf: `line(sm, entry)` is its line. */
function perLeaf(sm, line) {
	for (const entry of sm.getEntries()) {
		sm.branch(entry.id);
		out(line(entry));
	}
}

const ref_ = (op, field, i, ref) => (op[field] === null || op[field] === undefined ? null : ref(op[field], i, field));

/** One op on pi's SessionManager; the id of the entry it made, null for none, undefined
 * for an op pi has no call for. */
function apply(sm, files) {
	return (op, i, ref) => {
		switch (op?.op) {
			case "appendMessage":
				return sm.appendMessage(op.message);
			case "appendThinkingLevelChange":
				return sm.appendThinkingLevelChange(op.thinkingLevel);
			case "appendModelChange":
				return sm.appendModelChange(...splitModel(op));
			case "appendCompaction":
				// pi 1.6: a null firstKeptRef keeps nothing before the compaction ("retain none"),
				// and a compaction can carry the usage of the call that summarised
				return sm.appendCompaction(
					op.summary,
					ref_(op, "firstKeptRef", i, ref) ?? undefined,
					op.tokensBefore,
					op.details,
					op.fromHook ?? op.fromExtension,
					op.usage,
				);
			case "appendCustomEntry":
				return sm.appendCustomEntry(op.customType, op.data);
			case "appendCustomMessageEntry":
				return sm.appendCustomMessageEntry(op.customType, op.content, op.display, op.details);
			case "appendLabelChange":
				return sm.appendLabelChange(ref(op.targetRef, i, "targetRef"), op.label ?? undefined);
			case "appendUsage":
				if (!sm.appendUsage) return undefined;
				return sm.appendUsage(op.kind, op.provider, op.model, op.usage, op.note).id;
			case "appendContextEdit":
				if (!sm.appendContextEdit) return undefined;
				return sm.appendContextEdit(ref(op.targetRef, i, "targetRef"), op.replacement ?? null);
			case "branch":
				sm.branch(ref(op.ref, i, "ref"));
				return null;
			case "resetLeaf":
				sm.resetLeaf();
				return null;
			case "branchWithSummary":
				return sm.branchWithSummary(ref_(op, "ref", i, ref), op.summary, op.details, op.fromHook ?? op.fromExtension, op.usage);
			case "setSessionName":
				return sm.appendSessionInfo(op.name);
			case "createBranchedSession": {
				const file = sm.createBranchedSession(ref(op.ref, i, "ref"));
				if (file) files.push(file);
				return null;
			}
			case "flush":
				return null;
			default:
				return undefined;
		}
	};
}

async function run([opsFile, outDir]) {
	if (!outDir) die("run OPS.json OUTDIR [--json] [--skip-unsupported] [--cwd DIR]");
	const script = readOps(opsFile, die);
	const dir = path.resolve(outDir);
	fs.mkdirSync(dir, { recursive: true });
	const cwd = flags.get("--cwd") ?? script.cwd ?? dir;
	const sm = SessionManager.create(cwd, dir, script.sessionId === undefined ? undefined : { id: script.sessionId });
	const files = [sm.getSessionFile()];
	const ids = await runOps(script.ops, apply(sm, files), flags, die);
	const sessionFile = sm.getSessionFile();
	if (!flags.has("--json")) return out(sessionFile);
	out(JSON.stringify({ sessionFile, exists: fs.existsSync(sessionFile), sessionFiles: files, leafId: sm.getLeafId(), ids }));
}

const listJson = (list) =>
	JSON.stringify(list.map((s) => ({ ...s, created: s.created.toISOString(), modified: s.modified.toISOString() })));

try {
	switch (cmd) {
		case "context": {
			const sm = open(rest[0] ?? die("context FILE [--leaf ID | --null-leaf | --all-leaves]"));
			if (flags.has("--all-leaves"))
				perLeaf(sm, (e) => `{"leafId":${JSON.stringify(e.id)},"context":${JSON.stringify(sm.buildSessionContext())}}`);
			else out(JSON.stringify(leafAt(sm).buildSessionContext()));
			break;
		}
		case "tree":
			out(treeJson(open(rest[0] ?? die("tree FILE [--flat]")), flags.has("--flat")));
			break;
		case "run":
			await run(rest);
			break;
		case "bench":
			await bench(rest, flags, {
				name: peerName,
				root,
				open: (copy) => SessionManager.open(copy, path.dirname(copy)),
				create: (dir) => SessionManager.create(dir, dir),
				// pi 1.6's list(cwd, DIR) keeps only the sessions of cwd; listAll(DIR) reads the
				// whole dir, as 0.73.1's list(DIR, DIR) does
				list: (dir) => (peerName === "pi" ? SessionManager.list(dir, dir) : SessionManager.listAll(dir)),
				flush: () => {}, // pi writes synchronously
				close: () => {},
			}, die);
			break;
		case "entries": {
			const sm = open(rest[0] ?? die("entries FILE"));
			const name = sm.getSessionName?.() ?? null;
			out(JSON.stringify({ header: sm.getHeader(), entries: sm.getEntries(), leafId: sm.getLeafId(), name }));
			break;
		}
		case "llm": {
			const { convertToLlm } = await importCore("messages.js");
			const sm = open(rest[0] ?? die("llm FILE [--leaf ID | --all-leaves]"));
			if (flags.has("--all-leaves"))
				perLeaf(sm, (e) => {
					const messages = sm.buildSessionContext().messages;
					return `{"leafId":${JSON.stringify(e.id)},"messages":${JSON.stringify(messages)},"llm":${JSON.stringify(convertToLlm(messages))}}`;
				});
			else out(JSON.stringify(convertToLlm(leafAt(sm).buildSessionContext().messages)));
			break;
		}
		case "usage": {
			// what AgentSession.getSessionStats() (dist/core/agent-session.js) sums, with pi's own
			// helpers, over every entry of the file: usage entries, the usage of compactions and
			// branch summaries, of tool results, and of assistant messages
			const { createUsageTotals, addUsageToTotals } = await importCore("usage-totals.js");
			const sm = open(rest[0] ?? die("usage FILE"));
			const totals = createUsageTotals();
			for (const entry of sm.getEntries()) {
				if (entry.type === "usage") addUsageToTotals(totals, entry.usage);
				else if ((entry.type === "branch_summary" || entry.type === "compaction") && entry.usage) addUsageToTotals(totals, entry.usage);
				else if (entry.type === "message" && entry.message.role === "toolResult" && entry.message.usage)
					addUsageToTotals(totals, entry.message.usage);
				else if (entry.type === "message" && entry.message.role === "assistant") addUsageToTotals(totals, entry.message.usage);
			}
			out(JSON.stringify(totals));
			break;
		}
		case "projection": {
			const sm = leafAt(open(rest[0] ?? die("projection FILE [--leaf ID]")));
			const p = sm.buildSessionProjection();
			const entries = p.entries.map((e) => ({ id: e.sourceEntry.id, type: e.sourceEntry.type, n: e.messages.length }));
			out(JSON.stringify({ entries, thinkingLevel: p.thinkingLevel, model: p.model }));
			break;
		}
		case "list":
			out(listJson(await SessionManager.listAll(path.resolve(rest[0] ?? die("list DIR")))));
			break;
		case "listall":
			out(listJson(await SessionManager.listAll()));
			break;
		case "append": {
			const file = rest[0] ?? die("append FILE");
			if (!fs.existsSync(file)) die(`no such file: ${file}`);
			const sm = SessionManager.open(file);
			const text = `appended by ${peerName === "pi" ? "pi 0.73.1" : "pi 1.6.0"}`;
			const id = sm.appendMessage({ role: "user", content: [{ type: "text", text }], timestamp: 1767225600000 });
			out(JSON.stringify({ id, leafId: sm.getLeafId(), entries: sm.getEntries().length }));
			break;
		}
		default:
			die("usage: pi-oracle.mjs context|tree|run|bench|entries|llm|usage|projection|list|listall|append ... (see its header)");
	}
} catch (err) {
	die(err?.stack || String(err), 1);
}
process.exit(0);
