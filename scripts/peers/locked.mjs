// node locked.mjs LOCK DIR: exit 1 (naming the packages) unless every package npm installed
// in DIR (its node_modules/.package-lock.json) has the version and integrity LOCK pins.
import * as fs from "node:fs";
import * as path from "node:path";

const [lockFile, dir] = process.argv.slice(2);
const pinned = JSON.parse(fs.readFileSync(lockFile, "utf8")).packages;
const installed = JSON.parse(fs.readFileSync(path.join(dir, "node_modules/.package-lock.json"), "utf8")).packages;
const wrong = [];
for (const [where, pkg] of Object.entries(installed)) {
	const pin = pinned[where];
	if (!pin || pin.version !== pkg.version || (pin.integrity && pin.integrity !== pkg.integrity))
		wrong.push(`${where} ${pkg.version} (pinned: ${pin ? pin.version : "nothing"})`);
}
if (wrong.length > 0) {
	process.stderr.write(`${wrong.length} packages differ from ${lockFile}:\n  ${wrong.slice(0, 20).join("\n  ")}\n`);
	process.exit(1);
}
