/**
 * oh-my-pi's own prompt history (`HistoryStorage` of @oh-my-pi/pi-coding-agent, 18.2.3),
 * driven on one history.db, for tests/test_history_omp.py.
 *
 * Run under Bun, with SESSIONTREE_PEER_DIR the npm project oh-my-pi is installed in (as
 * tests/peers.py sets it; scripts/peers/setup installs it in .peers/omp):
 *   .peers/omp/node_modules/.bin/bun tests/peers_history.ts DB [add PROMPT CWD]...
 * Opens DB as oh-my-pi does (`HistoryStorage.open(DB)`: its schema checks and migration),
 * adds each PROMPT with its CWD in order, closes it, and prints the prompts it then holds,
 * newest first, as one JSON line: [{"prompt","created_at","cwd","sessionId"}, ...].
 * The caller sets HOME and PI_CODING_AGENT_DIR to a temporary dir: oh-my-pi reads them at
 * module load (its logger and default paths), and nothing may land in the real ~/.omp.
 * Exit code 1 with the message on stderr when oh-my-pi throws.
 */
import * as path from "node:path";

const PEER_DIR = process.env.SESSIONTREE_PEER_DIR || path.join(import.meta.dir, "..", ".peers", "omp");
const SRC = path.join(PEER_DIR, "node_modules/@oh-my-pi/pi-coding-agent/src/session/history-storage.ts");

const [db, ...ops] = process.argv.slice(2);
if (!db || ops.length % 3 !== 0 || ops.some((op, i) => i % 3 === 0 && op !== "add")) {
	console.error("usage: peers_history.ts DB [add PROMPT CWD]...");
	process.exit(2);
}
try {
	const { HistoryStorage } = await import(SRC);
	const history = HistoryStorage.open(db);
	for (let i = 0; i < ops.length; i += 3) await history.add(ops[i + 1], ops[i + 2]);
	const recent = history.getRecent(1000);
	HistoryStorage.close();
	console.log(
		JSON.stringify(
			recent.map((e: { prompt: string; created_at: number; cwd?: string; sessionId?: string }) => ({
				prompt: e.prompt,
				created_at: e.created_at,
				cwd: e.cwd ?? null,
				sessionId: e.sessionId ?? null,
			})),
		),
	);
} catch (error) {
	console.error(error instanceof Error ? error.message : String(error));
	process.exit(1);
}
