// What pi 0.73.1 leaves of an oh-my-pi session when it opens it (issue 32.3): the
// session's first line is oh-my-pi's title slot, not a header, so pi reads no entries
// and rewrites the file in place (writeFileSync: same inode) as a fresh header.
//
//   node scripts/gen_clobber_data.mjs   # pi from scripts/peers/setup ($SESSIONTREE_PEERS, or .peers)
//
// Writes tests/data/clobber/omp-session-opened-by-pi-0.73.1.jsonl from the first
// session of tests/data/peers/s3-omp-by-omp/.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const peers = process.env.SESSIONTREE_PEERS || join(root, ".peers");
const dist = join(peers, "pi/node_modules/@mariozechner/pi-coding-agent/dist/index.js");
const { SessionManager } = await import(dist);
const cases = join(root, "tests/data/peers/s3-omp-by-omp");
const name = readdirSync(cases).filter((n) => n.endsWith(".jsonl")).sort()[0];
const work = mkdtempSync(join(tmpdir(), "clobber-"));
const path = join(work, name);
copyFileSync(join(cases, name), path);
process.chdir(work); // pi writes its cwd into the fresh header
const before = statSync(path);
SessionManager.open(path);
const after = statSync(path);
if (after.ino !== before.ino) throw new Error("pi replaced the file instead of rewriting it");
const out = join(root, "tests/data/clobber/omp-session-opened-by-pi-0.73.1.jsonl");
writeFileSync(out, readFileSync(path));
console.log(`${name}: ${before.size} -> ${after.size} bytes, same inode; wrote ${out}`);
