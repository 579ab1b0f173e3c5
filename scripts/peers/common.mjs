// What the oracles share (pi-oracle.mjs under Node, omp-oracle.mjs under Bun): argument
// parsing, output, private copies of the files they read, the tree and op-script formats and
// the benchmark workloads. The formats are described in scripts/peers/README.md.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

export function dieWith(prefix) {
	return (msg, code = 2) => {
		process.stderr.write(`${prefix}: ${msg}\n`);
		process.exit(code);
	};
}

const VALUE_FLAGS = new Set(["--leaf", "--blobs", "--repeat", "--cwd"]);

/** `{positional, flags}`: flags in VALUE_FLAGS take the next argument, the others are booleans. */
export function parseArgs(argv, die) {
	const positional = [];
	const flags = new Map();
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		if (!a.startsWith("--")) positional.push(a);
		else if (!VALUE_FLAGS.has(a)) flags.set(a, true);
		else if (i + 1 < argv.length) flags.set(a, argv[++i]);
		else die(`${a} needs a value`);
	}
	return { positional, flags };
}

const WAIT = new Int32Array(new SharedArrayBuffer(4));

/** Print one line on fd 1, synchronously: outputs run to hundreds of megabytes, and stdout
 * may be a non-blocking pipe (EAGAIN: wait for the reader); a reader that left ends us. */
export function out(text) {
	const buf = Buffer.from(`${text}\n`, "utf8");
	let off = 0;
	while (off < buf.length) {
		try {
			off += fs.writeSync(1, buf, off, buf.length - off);
		} catch (err) {
			if (err?.code === "EPIPE") process.exit(0);
			if (err?.code !== "EAGAIN") throw err;
			Atomics.wait(WAIT, 0, 0, 1);
		}
	}
}

/** A fresh temp dir with `home/` and `agent/`, removed at exit unless ORACLE_KEEP_TMP=1. */
export function privateRoot(prefix) {
	const root = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
	fs.mkdirSync(path.join(root, "home"));
	fs.mkdirSync(path.join(root, "agent"));
	process.on("exit", () => {
		if (process.env.ORACLE_KEEP_TMP !== "1") fs.rmSync(root, { recursive: true, force: true });
	});
	return root;
}

/** A copy of FILE in its own dir under ROOT: opening a file may migrate or rewrite it. */
export function privateCopy(root, file, die) {
	if (!fs.existsSync(file)) die(`no such file: ${file}`);
	const dir = fs.mkdtempSync(path.join(root, "copy-"));
	const copy = path.join(dir, path.basename(file));
	fs.copyFileSync(file, copy);
	return copy;
}

/** `tree FILE [--flat]`: one JSON line. getTree() is walked without recursion: a linear
 * session nests two levels per entry, deeper than any stack. */
export function treeJson(sm, flat) {
	const entries = sm.getEntries();
	const labels = {};
	for (const e of entries) {
		const label = sm.getLabel(e.id);
		if (label !== undefined) labels[e.id] = label;
	}
	const rows = entries.map((e) => ({ id: e.id, parentId: e.parentId, type: e.type }));
	const head = `{"leafId":${JSON.stringify(sm.getLeafId())},"entries":${JSON.stringify(rows)},"labels":${JSON.stringify(labels)}`;
	const roots = sm.getTree();
	if (flat) {
		const children = {};
		const todo = [...roots];
		while (todo.length > 0) {
			const node = todo.pop();
			if (node.children.length > 0) children[node.entry.id] = node.children.map((c) => c.entry.id);
			todo.push(...node.children);
		}
		return `${head},"rootIds":${JSON.stringify(roots.map((r) => r.entry.id))},"children":${JSON.stringify(children)}}`;
	}
	const parts = [head, ',"roots":['];
	const stack = [{ nodes: roots, next: 0 }];
	while (stack.length > 0) {
		const top = stack[stack.length - 1];
		if (top.next === top.nodes.length) {
			stack.pop();
			parts.push(stack.length > 0 ? "]}" : "]");
			continue;
		}
		if (top.next > 0) parts.push(",");
		const node = top.nodes[top.next++];
		const label = node.label === undefined ? "null" : JSON.stringify(node.label);
		parts.push(`{"id":${JSON.stringify(node.entry.id)},"label":${label},"children":[`);
		stack.push({ nodes: node.children, next: 0 });
	}
	parts.push("}");
	return parts.join("");
}

/** An op script: a JSON array of ops, or `{cwd?, sessionId?, ops}`. */
export function readOps(file, die) {
	const data = JSON.parse(fs.readFileSync(file, "utf8"));
	if (Array.isArray(data)) return { ops: data };
	if (data && Array.isArray(data.ops)) return data;
	die("an op script is a JSON array of ops or {ops:[...]}");
}

/** Run `ops` through `apply(op, i, ref)` (which returns the entry id it made, or null);
 * `ref(n, i, field)` is the id op n made. Ops `apply` does not know (it returns undefined)
 * fail, or with --skip-unsupported make no entry. Returns the id per op. */
export async function runOps(ops, apply, flags, die) {
	const ids = [];
	const ref = (n, i, field) => {
		if (!Number.isInteger(n) || n < 0 || n >= i) die(`op ${i}: ${field} must be the index of an earlier op (got ${JSON.stringify(n)})`);
		if (ids[n] == null) die(`op ${i}: ${field}=${n} is an op that made no entry`);
		return ids[n];
	};
	for (let i = 0; i < ops.length; i++) {
		const name = ops[i]?.op;
		let id;
		try {
			id = await apply(ops[i], i, ref);
		} catch (err) {
			die(`op ${i} (${name}) threw: ${err?.stack || err}`, 3);
		}
		if (id === undefined) {
			if (!flags.has("--skip-unsupported")) die(`op ${i}: unsupported op ${JSON.stringify(name)} (--skip-unsupported skips it)`);
			id = null;
		}
		ids.push(id);
	}
	return ids;
}

/** "provider/id" (or the op's provider and modelId) as [provider, modelId]. */
export function splitModel(op) {
	if (op.provider !== undefined || op.modelId !== undefined) return [op.provider, op.modelId];
	const model = String(op.model);
	const slash = model.indexOf("/");
	return slash < 0 ? [model, model] : [model.slice(0, slash), model.slice(slash + 1)];
}

// ---------------------------------------------------------------- bench

const r3 = (x) => Math.round(x * 1000) / 1000;

/** `ms` is the first run (what a one-shot caller sees); the spread only with --repeat > 1. */
function timings(runs) {
	if (runs.length === 1) return { ms: r3(runs[0]) };
	const sorted = [...runs].sort((a, b) => a - b);
	return {
		ms: r3(runs[0]),
		medianMs: r3(sorted[Math.floor((sorted.length - 1) / 2)]),
		minMs: r3(sorted[0]),
		maxMs: r3(sorted[sorted.length - 1]),
		runs: runs.map(r3),
	};
}

function kb1Text(i) {
	const base = `Message ${i}: the quick brown fox jumps over the lazy dog while the session tree grows. `;
	return base.repeat(Math.ceil(1024 / base.length)).slice(0, 1024);
}

function benchMessage(i) {
	const ts = 1_700_000_000_000 + i;
	if (i % 2 === 0) return { role: "user", content: [{ type: "text", text: kb1Text(i) }], timestamp: ts };
	return {
		role: "assistant",
		content: [{ type: "text", text: kb1Text(i) }],
		api: "anthropic-messages",
		provider: "anthropic",
		model: "claude-sonnet-4-5",
		usage: {
			input: 100,
			output: 50,
			cacheRead: 0,
			cacheWrite: 0,
			totalTokens: 150,
			cost: { input: 0.0003, output: 0.00075, cacheRead: 0, cacheWrite: 0, total: 0.00105 },
		},
		stopReason: "stop",
		timestamp: ts,
	};
}

/** `bench WORKLOAD ...`, one JSON line. `peer` opens (async) / creates / lists / closes
 * sessions its own way: {name, root, open(file), create(dir), list(dir), flush(sm), close(sm), listNote?}. */
export async function bench(args, flags, peer, die) {
	const [workload, a1, a2] = args;
	const repeat = Math.max(1, Number(flags.get("--repeat") ?? 1));
	const now = () => performance.now();
	const head = { workload, peer: peer.name };
	const openTimed = async (file) => {
		const copy = privateCopy(peer.root, file, die);
		const t0 = now();
		const sm = await peer.open(copy);
		return { sm, t0, copy };
	};
	switch (workload) {
		case "load": {
			if (!a1) die("bench load FILE");
			const runs = [];
			let messages = 0;
			let entries = 0;
			for (let r = 0; r < repeat; r++) {
				const { sm, t0, copy } = await openTimed(a1);
				messages = sm.buildSessionContext().messages.length;
				runs.push(now() - t0);
				entries = sm.getEntries().length;
				await peer.close(sm);
				fs.rmSync(path.dirname(copy), { recursive: true, force: true });
			}
			return out(JSON.stringify({ ...head, file: a1, bytes: fs.statSync(a1).size, entries, messages, ...timings(runs) }));
		}
		case "context": {
			if (!a1) die("bench context FILE N");
			const n = Math.max(1, Number(a2 ?? 10));
			const { sm } = await openTimed(a1);
			let messages = 0;
			const t0 = now();
			for (let i = 0; i < n; i++) messages = sm.buildSessionContext().messages.length;
			const ms = now() - t0;
			return out(JSON.stringify({ ...head, file: a1, n, messages, ms: r3(ms), perCallMs: r3(ms / n) }));
		}
		case "append": {
			if (!a1) die("bench append DIR N");
			const n = Math.max(1, Number(a2 ?? 1000));
			const dir = path.resolve(a1);
			fs.mkdirSync(dir, { recursive: true });
			const sm = peer.create(dir);
			// the first assistant message writes the file: timed apart from the steady state
			const tw = now();
			sm.appendMessage(benchMessage(0));
			sm.appendMessage(benchMessage(1));
			await peer.flush(sm);
			const warmMs = now() - tw;
			const t0 = now();
			for (let i = 0; i < n; i++) sm.appendMessage(benchMessage(i + 2));
			await peer.flush(sm);
			const ms = now() - t0;
			await peer.close(sm);
			const file = sm.getSessionFile();
			return out(
				JSON.stringify({ ...head, n, ms: r3(ms), entriesPerSec: Math.round((n / ms) * 1000), firstTwoMs: r3(warmMs), file, bytes: fs.statSync(file).size }),
			);
		}
		case "list": {
			if (!a1) die("bench list DIR");
			const dir = path.resolve(a1);
			const runs = [];
			let count = 0;
			for (let r = 0; r < repeat; r++) {
				const t0 = now();
				count = (await peer.list(dir)).length;
				runs.push(now() - t0);
			}
			return out(JSON.stringify({ ...head, dir, count, ...timings(runs), note: repeat > 1 ? peer.listNote : undefined }));
		}
		case "tree": {
			if (!a1) die("bench tree FILE");
			const runs = [];
			let getTreeMs = 0;
			let roots = 0;
			let entries = 0;
			for (let r = 0; r < repeat; r++) {
				const { sm, t0, copy } = await openTimed(a1);
				const t1 = now();
				roots = sm.getTree().length;
				const t2 = now();
				runs.push(t2 - t0);
				if (r === 0) getTreeMs = t2 - t1;
				entries = sm.getEntries().length;
				await peer.close(sm);
				fs.rmSync(path.dirname(copy), { recursive: true, force: true });
			}
			return out(JSON.stringify({ ...head, file: a1, entries, roots, ...timings(runs), getTreeMs: r3(getTreeMs) }));
		}
		default:
			die("bench load FILE | context FILE N | append DIR N | list DIR | tree FILE [--repeat R]");
	}
}
