#!/usr/bin/env node
/**
 * Generate JSON.stringify test vectors for sessiontree's serializer.
 *
 * Regenerate (from the repository root, needs only `node`, tested with v20):
 *
 *     node scripts/gen_js_vectors.mjs [OUT]        # default OUT: tests/data/js_stringify_vectors.jsonl
 *
 * Output: one JSON line per case, `{"name", "input", "output"}`, where `output` is the
 * exact `JSON.stringify({v: value})` string and `input` encodes `value` so that Python
 * can rebuild it exactly (see tests/data/README.md):
 *
 *   {"$num": "<16 hex digits>"}   a float64, big-endian IEEE-754 bits
 *                                 (Python: struct.unpack(">d", bytes.fromhex(h))[0])
 *   {"$int": "<decimal>"}         the same number as a Python int (only safe integers)
 *   {"$str": [u16, ...]}          a string as UTF-16 code units (lone surrogates kept)
 *   {"$undef": true}              JavaScript undefined (Python: sessiontree.UNSET)
 *   {"$obj": [[key, value], ...]} an object; `key` is a {"$str": ...}; pairs in the order
 *                                 the object was built (insertion order)
 *   [ ... ]                       an array of encoded values
 *   null / true / false           themselves
 *
 * The script is deterministic (seeded PRNG), so re-running it reproduces the file.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OUT = process.argv[2] ?? path.join(HERE, "..", "tests", "data", "js_stringify_vectors.jsonl");

// ------------------------------------------------------------------ encoding
const UNDEF = Symbol("undefined");

/** An object described by its construction order: [[key, value], ...]. */
class Obj {
	constructor(pairs) {
		this.pairs = pairs;
	}
}

function numHex(x) {
	const dv = new DataView(new ArrayBuffer(8));
	dv.setFloat64(0, x, false);
	let s = "";
	for (let i = 0; i < 8; i++) s += dv.getUint8(i).toString(16).padStart(2, "0");
	return s;
}

function strUnits(s) {
	const out = [];
	for (let i = 0; i < s.length; i++) out.push(s.charCodeAt(i));
	return { $str: out };
}

/** Encode a description for Python. intMode: safe integers become {"$int"}. */
function enc(v, intMode) {
	if (v === UNDEF) return { $undef: true };
	if (v === null || v === true || v === false) return v;
	if (typeof v === "number") {
		if (intMode && Number.isSafeInteger(v) && !Object.is(v, -0)) return { $int: String(v) };
		return { $num: numHex(v) };
	}
	if (typeof v === "string") return strUnits(v);
	if (Array.isArray(v)) return v.map((x) => enc(x, intMode));
	if (v instanceof Obj) return { $obj: v.pairs.map(([k, x]) => [strUnits(k), enc(x, intMode)]) };
	throw new Error(`cannot encode ${typeof v}`);
}

/** Build the real JavaScript value from a description. */
function toJs(v) {
	if (v === UNDEF) return undefined;
	if (Array.isArray(v)) return v.map(toJs);
	if (v instanceof Obj) {
		const o = {};
		// defineProperty: "__proto__" becomes an own property like JSON.parse makes it
		for (const [k, x] of v.pairs) {
			Object.defineProperty(o, k, { value: toJs(x), enumerable: true, writable: true, configurable: true });
		}
		return o;
	}
	return v;
}

const obj = (...pairs) => new Obj(pairs);

// ------------------------------------------------------------------ cases
const cases = [];
const names = new Set();
function add(name, value, intMode = true) {
	if (names.has(name)) throw new Error(`duplicate case name ${name}`);
	names.add(name);
	const output = JSON.stringify(toJs(obj(["v", value])));
	cases.push({ name, input: enc(value, intMode), output });
}
/** A number case; safe integers get a float and an int variant. */
function addNum(name, x) {
	if (Number.isSafeInteger(x) && !Object.is(x, -0)) {
		add(`${name}/int`, x, true);
		add(`${name}/float`, x, false);
	} else add(name, x, false);
}

// deterministic PRNG (xorshift128+ on BigInt, seeded)
let s0 = 0x9e3779b97f4a7c15n;
let s1 = 0xd1b54a32d192ed03n;
const M64 = (1n << 64n) - 1n;
function next64() {
	let x = s0;
	const y = s1;
	s0 = y;
	x ^= (x << 23n) & M64;
	s1 = x ^ y ^ (x >> 17n) ^ (y >> 26n);
	return (s1 + y) & M64;
}
const rand = () => Number(next64() >> 11n) / 2 ** 53; // [0, 1)
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo)); // [lo, hi)
function bitsToDouble(b) {
	const dv = new DataView(new ArrayBuffer(8));
	dv.setBigUint64(0, b, false);
	return dv.getFloat64(0, false);
}

// --- numbers: integers
for (const x of [0, 1, -1, 2, 7, 10, 42, 100, 255, 1000, 65535, 1e6, 123456789, 2 ** 31 - 1, 2 ** 31, -(2 ** 31),
	2 ** 32, 1_763_681_581_544, 1e15, 1e16 - 1, 2 ** 53 - 1, -(2 ** 53 - 1)]) {
	addNum(`int/${x}`, x);
}
addNum("int/2**53", 2 ** 53);
addNum("int/2**53+2", 2 ** 53 + 2);
addNum("int/-2**53", -(2 ** 53));
addNum("int/2**64", 2 ** 64);
addNum("neg_zero", -0);
addNum("pos_zero", 0.0 * 1); // same bits as 0 (kept for the name)
// --- numbers: classic float cases
addNum("0.1+0.2", 0.1 + 0.2);
addNum("0.1", 0.1);
addNum("0.5", 0.5);
addNum("1.5", 1.5);
addNum("-1.5", -1.5);
addNum("1/3", 1 / 3);
addNum("2/3", 2 / 3);
addNum("pi", Math.PI);
addNum("e", Math.E);
addNum("1e21", 1e21);
addNum("-1e21", -1e21);
addNum("1e-7", 1e-7);
addNum("1e+300", 1e300);
addNum("-1e+300", -1e300);
addNum("1.7976931348623157e308", Number.MAX_VALUE);
addNum("123456789012345680000", 123456789012345680000);
addNum("5e-324", 5e-324);
addNum("-5e-324", -5e-324);
addNum("2.2250738585072014e-308", 2.2250738585072014e-308);
addNum("2.225073858507201e-308", 2.225073858507201e-308);
addNum("0.000003", 0.000003);
addNum("0.000015", 0.000015);
addNum("-1.5e-10", -1.5e-10);
addNum("1.5e-5", 1.5e-5);
addNum("0.00001", 0.00001);
addNum("1e-5*3", 3 * 1e-5);
addNum("4.35", 4.35);
addNum("100.0", 100.0);
addNum("1.0e2", 1.0e2);
addNum("cost/inp*3/1e6", 12345 * 3 / 1e6);
addNum("cost/0.3*77777/1e6", (77777 * 0.3) / 1e6);
addNum("cost/3.75*19999/1e6", (19999 * 3.75) / 1e6);
addNum("cost/sum", 0.037035 + 0.05997 + 0.0233331 + 0.07499625);
// --- numbers: around the exponent switch thresholds (1e21 and 1e-6)
for (const [n, x] of [
	["1e20", 1e20],
	["9.99e20", 9.99e20],
	["9.999999999999999e20", 9.999999999999999e20],
	["999999999999999900000", 999999999999999900000],
	["1e21-ulp", 1e21 - 131072],
	["1e21+ulp", 1e21 + 131072],
	["1.0000000000000001e21", 1.0000000000000001e21],
	["1.5e21", 1.5e21],
	["1e22", 1e22],
	["1.2345e20", 1.2345e20],
	["1e-6", 1e-6],
	["9.9e-7", 9.9e-7],
	["9.999999999999999e-7", 9.999999999999999e-7],
	["1.0000000000000002e-6", 1.0000000000000002e-6],
	["1.5e-6", 1.5e-6],
	["1.2345e-6", 1.2345e-6],
	["-1e-6", -1e-6],
	["-9.9e-7", -9.9e-7],
	["1e-300", 1e-300],
	["1.7e-10", 1.7e-10],
	["123e-20", 123e-20],
	["1e16", 1e16],
	["1.2e16", 1.2e16],
	["12345678901234567", 12345678901234567],
	["0.1e-5", 0.1e-5],
]) {
	addNum(`threshold/${n}`, x);
}
// --- non-finite numbers: JSON.stringify writes null
addNum("nonfinite/NaN", Number.NaN);
addNum("nonfinite/Infinity", Number.POSITIVE_INFINITY);
addNum("nonfinite/-Infinity", Number.NEGATIVE_INFINITY);
// --- many random doubles (seeded)
for (let i = 0; i < 150; i++) {
	let x;
	do {
		x = bitsToDouble(next64());
	} while (!Number.isFinite(x));
	addNum(`random/bits/${i}`, x);
}
for (let i = 0; i < 100; i++) {
	// magnitudes spread over [1e-12, 1e25]
	const x = (rand() < 0.5 ? -1 : 1) * rand() * 10 ** randInt(-12, 26);
	addNum(`random/scaled/${i}`, x);
}
for (let i = 0; i < 60; i++) {
	// "decimal-looking" values: few significant digits, the usual JS-vs-repr trouble
	const x = randInt(1, 100000) / 10 ** randInt(0, 12);
	addNum(`random/decimal/${i}`, x);
}
for (let i = 0; i < 40; i++) {
	// per-token price arithmetic as in the generated usage.cost
	const price = [3, 15, 0.3, 3.75, 1.25, 10, 0.125, 0.31][randInt(0, 8)];
	addNum(`random/cost/${i}`, (randInt(0, 200000) * price) / 1e6);
}
for (let i = 0; i < 30; i++) addNum(`random/int/${i}`, randInt(-(2 ** 31), 2 ** 31) * randInt(1, 2 ** 21));

// --- strings
add("str/empty", "");
add("str/ascii", "hello world");
for (let c = 0; c < 32; c++) add(`str/control/${c}`, `a${String.fromCharCode(c)}b`);
add("str/all_controls", Array.from({ length: 32 }, (_, c) => String.fromCharCode(c)).join(""));
add("str/del", "\x7f");
add("str/c1_controls", "\x80\x85\x9f\xa0");
add("str/u2028_u2029", "line\u2028sep\u2029para");
add("str/slash", "a/b</script>");
add("str/quote", 'say "hi"');
add("str/backslash", "C:\\path\\to\\file \\u0041 \\n");
add("str/non_ascii", "é ü ß 中文 日本語 Ωμέγα — “quoted” \u00a0");
add("str/emoji", "🙂🚀 𝔘𝔫𝔦 👩‍💻 🇮🇹");
add("str/lone_high", "x\ud800y");
add("str/lone_low", "x\udc00y");
add("str/lone_high_end", "end\udbff");
add("str/lone_low_start", "\udfffstart");
add("str/reversed_pair", "\udc00\ud800");
add("str/high_high_low", "\ud83d\ud83d\ude80");
add("str/only_surrogates", "\ud800\udbff\udc00\udfff");
add("str/bmp_edges", "\ufeff\ufffd\uffff\ue000");
add("str/nul_mid", "a\u0000b\u0000");
add("str/mixed_escapes", 'tab\tnl\ncr\rbs\bff\f "q" \\ / \u001f \u007f \u2028 🙂 \ud800');
add("str/long", "abc ".repeat(2500));

// --- literals, containers
add("null", null);
add("true", true);
add("false", false);
add("empty_object", obj());
add("empty_array", []);
add("nested_empty", [[], obj(), [obj(["a", []])]]);
add(
	"nested/message",
	obj(
		["role", "assistant"],
		[
			"content",
			[
				obj(["type", "thinking"], ["thinking", "Let me think…"], ["thinkingSignature", "c2lnbmF0dXJl"]),
				obj(["type", "text"], ["text", "Done. ✓"]),
				obj(["type", "toolCall"], ["id", "toolu_01"], ["name", "bash"], ["arguments", obj(["command", "ls -la"], ["timeout", 30])]),
			],
		],
		["api", "anthropic-messages"],
		["provider", "anthropic"],
		["model", "claude-sonnet-4-5"],
		[
			"usage",
			obj(
				["input", 1234],
				["output", 56],
				["cacheRead", 0],
				["cacheWrite", 0],
				["totalTokens", 1290],
				["cost", obj(["input", 0.003702], ["output", 0.00084], ["cacheRead", 0], ["cacheWrite", 0], ["total", 0.003702 + 0.00084])],
			),
		],
		["stopReason", "toolUse"],
		["timestamp", 1763681581544],
	),
);
add("nested/deep", [[[[[[[[[[obj(["deep", [1, 2.5, null, true, "x"]])]]]]]]]]]]);
add("nested/mixed_array", [1, "two", 3.5, null, false, obj(["k", "v"]), [], obj()]);
add("nested/float_values_int_valued", [1.0, -0, 2.0, 1e21, 100.0], false);
add("keys/escapes", obj(['"quoted"', 1], ["back\\slash", 2], ["new\nline", 3], ["tab\t", 4], ["\u0000", 5], ["\u001f", 6], ["/", 7]));
add("keys/non_ascii", obj(["ключ", 1], ["键", 2], ["🙂", 3], ["é", 4]));
add("keys/lone_surrogates", obj(["\ud800", 1], ["\udc00", 2], ["a\u2028b", 3]));
add("keys/empty", obj(["", "empty key"], ["a", ""]));
add("keys/order_kept", obj(["zeta", 1], ["alpha", 2], ["Mid", 3], ["_", 4], ["a b", 5]));
add("keys/__proto__", obj(["__proto__", obj(["x", 1])], ["y", 2]));
// integer-like keys: a JS object lists array-index keys first, in ascending numeric
// order, whatever the insertion order (JSON.parse gives the same order)
add("int_like_keys/basic", obj(["b", 1], ["2", 2], ["1", 3], ["a", 4], ["0", 5]));
add("int_like_keys/not_canonical", obj(["z", 1], ["01", 2], ["-1", 3], ["1.5", 4], [" 1", 5], ["1e3", 6], ["10", 7], ["9", 8]));
add("int_like_keys/limits", obj(["x", 1], ["4294967295", 2], ["4294967294", 3], ["9007199254740993", 4], ["0", 5]));
add("int_like_keys/lines", obj(["path", "a.ts"], ["120", "x"], ["7", "y"], ["33", "z"]));
// undefined
add("undef/value_dropped", obj(["a", 1], ["b", UNDEF], ["c", null]));
add("undef/all_dropped", obj(["a", UNDEF], ["b", UNDEF]));
add("undef/nested_dropped", obj(["outer", obj(["keep", "x"], ["drop", UNDEF], ["inner", obj(["gone", UNDEF])])], ["z", UNDEF]));
add("undef/first_and_last", obj(["first", UNDEF], ["mid", [1, obj(["u", UNDEF], ["k", 0])]], ["last", UNDEF]));
add("undef/top_level", UNDEF); // {"v": undefined} -> "{}"
add("undef/in_array", [1, UNDEF, 3]); // arrays write null for undefined
for (let i = 0; i < 25; i++) {
	// random nested values with strings from a mixed alphabet
	const alphabet = ["a", "Z", " ", "\n", "\t", '"', "\\", "/", "é", "中", "🙂", "\u2028", "\u0001", "\x7f", "\ud800", "\udfff"];
	const str = () => Array.from({ length: randInt(0, 12) }, () => alphabet[randInt(0, alphabet.length)]).join("");
	const val = (depth) => {
		const r = rand();
		if (depth > 3 || r < 0.3) {
			const t = randInt(0, 7);
			return [null, true, false, str(), randInt(-1000, 1000), rand() * 10 ** randInt(-8, 23), UNDEF][t];
		}
		if (r < 0.6) return Array.from({ length: randInt(0, 5) }, () => val(depth + 1));
		return new Obj(Array.from({ length: randInt(0, 5) }, (_, j) => [`k${str()}${j}`, val(depth + 1)]));
	};
	add(`random/nested/${i}`, val(0));
}

fs.mkdirSync(path.dirname(OUT), { recursive: true });
fs.writeFileSync(OUT, `${cases.map((c) => JSON.stringify(c)).join("\n")}\n`);
process.stdout.write(`wrote ${cases.length} cases to ${OUT}\n`);
