#!/usr/bin/env bun
/**
 * oh-my-pi as an oracle: what oh-my-pi's own session code (src/session/*.ts, run by Bun)
 * makes of a session file, or writes for an op script. $SESSIONTREE_PEER_DIR is the npm
 * project it is installed in (scripts/peers/setup: .peers/omp, with the Bun that runs this).
 *
 *   context FILE [--leaf ID | --null-leaf | --all-leaves] [--blobs DIR] [--raw]
 *   tree FILE [--flat] [--blobs DIR]
 *   run OPS.json OUTDIR [--blobs DIR] [--json] [--skip-unsupported] [--cwd DIR]
 *   bench load|context|append|list|tree ...
 *   foreign claude|codex ROOT   oh-my-pi's importers of Claude Code / Codex sessions: one
 *                               line per session under ROOT, {info, header, entries, context}
 *
 * oh-my-pi resolves HOME and its agent dir when its modules load, and Bun's os.homedir()
 * ignores a later $HOME: so the script runs itself once more, with HOME and
 * PI_CODING_AGENT_DIR in a private temp dir (nothing lands in the real ~/.omp), and the
 * variables that would choose another profile or terminal cleared. --blobs DIR makes
 * <agent dir>/blobs a link to DIR, so blob refs resolve (and `run` stores its blobs there;
 * by default in OUTDIR/blobs). Exit codes: 0 ok, 1 oh-my-pi threw, 2 usage, 3 an op threw.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { bench, dieWith, out, parseArgs, privateCopy, privateRoot, readOps, runOps, treeJson } from "./common.mjs";

const die = dieWith("omp-oracle");
const projectDir = process.env.SESSIONTREE_PEER_DIR || die("SESSIONTREE_PEER_DIR is not set (run this through scripts/peers/oracle)");
const sessionSrc = path.join(projectDir, "node_modules/@oh-my-pi/pi-coding-agent/src/session");
if (!fs.existsSync(sessionSrc)) die(`no oh-my-pi in ${projectDir} (scripts/peers/setup installs it)`);

const CHILD = "SESSIONTREE_OMP_ORACLE_ROOT";
if (!process.env[CHILD]) {
	const root = privateRoot("omp-oracle-");
	const env = { ...process.env, HOME: path.join(root, "home"), PI_CODING_AGENT_DIR: path.join(root, "agent"), [CHILD]: root };
	for (const name of ["XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "OMP_PROFILE", "PI_PROFILE", "PI_CONFIG_DIR"]) delete env[name];
	for (const name of ["ZELLIJ_PANE_ID", "TMUX_PANE", "TERM_SESSION_ID", "WT_SESSION", "KITTY_WINDOW_ID"]) delete env[name];
	const child = Bun.spawnSync([process.execPath, import.meta.path, ...process.argv.slice(2)], {
		env,
		stdin: "ignore",
		stdout: "inherit",
		stderr: "inherit",
	});
	process.exit(child.exitCode ?? 1);
}

const root = process.env[CHILD];
const agentDir = process.env.PI_CODING_AGENT_DIR;
const { SessionManager } = await import(path.join(sessionSrc, "session-manager.ts"));
const { positional, flags } = parseArgs(process.argv.slice(2), die);
const [cmd, ...rest] = positional;

function linkBlobs(dir) {
	if (!dir) return;
	const target = path.resolve(dir);
	fs.mkdirSync(target, { recursive: true });
	const link = path.join(agentDir, "blobs");
	fs.rmSync(link, { recursive: true, force: true });
	fs.symlinkSync(target, link);
}

function open(file) {
	const copy = privateCopy(root, file, die);
	return SessionManager.open(copy, path.dirname(copy), undefined, { suppressBreadcrumb: true });
}

/** The context as the tests compare it; --raw: the whole SessionContext. */
function contextJson(ctx) {
	if (flags.has("--raw")) return JSON.stringify(ctx);
	const { messages, thinkingLevel, models, injectedTtsrRules, mode, modeData } = ctx;
	return JSON.stringify({ messages, thinkingLevel, models, injectedTtsrRules, mode, modeData });
}

/** One op on oh-my-pi's SessionManager; the id of the entry it made, null for none,
 * undefined for an op it has no call for. */
function apply(sm, files) {
	return async (op, i, ref) => {
		switch (op?.op) {
			case "appendMessage":
				return sm.appendMessage(op.message);
			case "appendThinkingLevelChange":
				return sm.appendThinkingLevelChange(op.thinkingLevel ?? undefined, op.configured ?? undefined);
			case "appendModelChange":
				return sm.appendModelChange(op.model ?? `${op.provider}/${op.modelId}`, op.role ?? undefined, op.resolvedModelIsFallback ?? false);
			case "appendCompaction": {
				const extra = { details: op.details, fromExtension: op.fromExtension, tokensAfter: op.tokensAfter, method: op.method };
				return sm.appendCompaction(op.summary, op.shortSummary ?? undefined, ref(op.firstKeptRef, i, "firstKeptRef"), op.tokensBefore, extra);
			}
			case "appendCustomEntry":
				return sm.appendCustomEntry(op.customType, op.data);
			case "appendCustomMessageEntry":
				return sm.appendCustomMessageEntry(op.customType, op.content, op.display, op.details, op.attribution ?? "agent");
			case "appendLabelChange":
				return sm.appendLabelChange(ref(op.targetRef, i, "targetRef"), op.label ?? undefined);
			case "appendTtsrInjection":
				return sm.appendTtsrInjection(op.rules ?? op.ruleNames ?? []);
			case "appendSessionInit":
				return sm.appendSessionInit(op.init);
			case "appendModeChange":
				return sm.appendModeChange(op.mode, op.data);
			case "branch":
				sm.branch(ref(op.ref, i, "ref"));
				return null;
			case "resetLeaf":
				sm.resetLeaf();
				return null;
			case "branchWithSummary": {
				const from = op.ref === null || op.ref === undefined ? null : ref(op.ref, i, "ref");
				return sm.branchWithSummary(from, op.summary, op.details, op.fromExtension);
			}
			case "setSessionName": {
				// a rename oh-my-pi refuses (empty, or "auto" after "user") writes no entry
				const before = sm.getLeafId();
				const renamed = await sm.setSessionName(op.name, op.source ?? "auto", op.trigger);
				const after = sm.getLeafId();
				return renamed && after !== before ? after : null;
			}
			case "createBranchedSession": {
				const file = sm.createBranchedSession(ref(op.ref, i, "ref"));
				if (file) files.push(file);
				return null;
			}
			case "flush":
				await sm.flush();
				return null;
			default:
				return undefined;
		}
	};
}

async function run([opsFile, outDir]) {
	if (!outDir) die("run OPS.json OUTDIR [--blobs DIR] [--json] [--skip-unsupported] [--cwd DIR]");
	const script = readOps(opsFile, die);
	const dir = path.resolve(outDir);
	fs.mkdirSync(dir, { recursive: true });
	linkBlobs(flags.get("--blobs") ?? path.join(dir, "blobs"));
	const sm = SessionManager.create(flags.get("--cwd") ?? script.cwd ?? dir, dir);
	const files = [sm.getSessionFile()];
	const ids = await runOps(script.ops, apply(sm, files), flags, die);
	await sm.flush();
	await sm.close();
	const sessionFile = sm.getSessionFile();
	if (!flags.has("--json")) return out(sessionFile);
	const blobsDir = fs.realpathSync(path.join(agentDir, "blobs"));
	out(JSON.stringify({ sessionFile, exists: fs.existsSync(sessionFile), sessionFiles: files, leafId: sm.getLeafId(), ids, blobsDir }));
}

async function foreign([source, dir]) {
	if ((source !== "claude" && source !== "codex") || !dir) die("foreign claude|codex ROOT");
	const mod = await import(path.join(sessionSrc, `${source}-session-store.ts`));
	const Store = source === "claude" ? mod.ClaudeSessionStore : mod.CodexSessionStore;
	const store = new Store(path.resolve(dir));
	for (const info of await store.list()) {
		let line;
		try {
			const sm = await store.load(info);
			const parts = [JSON.stringify(info), JSON.stringify(sm.getHeader()), JSON.stringify(sm.getEntries()), contextJson(sm.buildSessionContext())];
			line = `{"info":${parts[0]},"header":${parts[1]},"entries":${parts[2]},"context":${parts[3]}}`;
		} catch (err) {
			line = JSON.stringify({ info, error: err instanceof Error ? err.message : String(err) });
		}
		out(line);
	}
}

try {
	switch (cmd) {
		case "context": {
			linkBlobs(flags.get("--blobs"));
			const sm = await open(rest[0] ?? die("context FILE [--leaf ID | --null-leaf | --all-leaves] [--blobs DIR] [--raw]"));
			if (flags.has("--all-leaves")) {
				for (const entry of sm.getEntries()) {
					sm.branch(entry.id);
					out(`{"leafId":${JSON.stringify(entry.id)},"context":${contextJson(sm.buildSessionContext())}}`);
				}
			} else {
				if (flags.has("--null-leaf")) sm.resetLeaf();
				else if (flags.has("--leaf")) sm.branch(flags.get("--leaf"));
				out(contextJson(sm.buildSessionContext()));
			}
			await sm.close();
			break;
		}
		case "tree": {
			linkBlobs(flags.get("--blobs"));
			const sm = await open(rest[0] ?? die("tree FILE [--flat] [--blobs DIR]"));
			out(treeJson(sm, flags.has("--flat")));
			await sm.close();
			break;
		}
		case "run":
			await run(rest);
			break;
		case "bench":
			await bench(rest, flags, {
				name: "omp",
				root,
				open: (copy) => SessionManager.open(copy, path.dirname(copy), undefined, { suppressBreadcrumb: true }),
				create: (dir) => SessionManager.create(dir, dir),
				list: (dir) => SessionManager.list(dir, dir),
				flush: (sm) => sm.flush(),
				close: (sm) => sm.close(),
				listNote: "omp caches scans per (path,mtime,size) in-process: runs after the first are cache hits",
			}, die);
			break;
		case "foreign":
			await foreign(rest);
			break;
		default:
			die("usage: omp-oracle.mjs context|tree|run|bench|foreign ... (see its header)");
	}
} catch (err) {
	die(err instanceof Error ? err.stack || err.message : String(err), 1);
}
process.exit(0);
