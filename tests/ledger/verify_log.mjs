// An independent verifier of the ledger's log format, written from docs/ledger.md alone
// ("The transparency log"): Node's crypto, no packages. Reads a JSON file of the shape of
// tests/ledger/data/log-vectors.json, or a real export with proof files from `ledger prove`,
// and checks every entry's canonical bytes, the leaf hashes, the root, the heads' signatures,
// an inclusion proof and a consistency proof.
//
//   node verify_log.mjs FILE      -> prints a JSON verdict; exit 0 when all holds, 1 otherwise
import { createHash, createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";

const sha256 = (...parts) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
};
const leafHash = (bytes) => sha256(Buffer.from([0]), bytes);
const nodeHash = (l, r) => sha256(Buffer.from([1]), l, r);

// RFC 8785: ECMAScript's own JSON.stringify for strings and numbers; names sorted by UTF-16
// code units, which is what Array.prototype.sort does with strings.
function jcs(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
  const keys = Object.keys(v).sort();
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
}

function mth(leaves) {
  if (leaves.length === 0) return sha256(Buffer.alloc(0));
  if (leaves.length === 1) return leaves[0];
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

// RFC 9162 section 2.1.3.2
function verifyInclusion(leaf, index, size, path, root) {
  if (index >= size) return false;
  let fn = index, sn = size - 1, r = leaf;
  for (const p of path) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(root);
}

// RFC 9162 section 2.1.4.2
function verifyConsistency(first, second, firstRoot, secondRoot, proof) {
  if (first === second) return proof.length === 0 && firstRoot.equals(secondRoot);
  if (first === 0 || first > second || proof.length === 0) return false;
  const path = (first & (first - 1)) === 0 ? [firstRoot, ...proof] : [...proof];
  let fn = first - 1, sn = second - 1;
  while (fn % 2 === 1) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
  let fr = path[0], sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr); sr = nodeHash(c, sr);
      if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
  }
  return fr.equals(firstRoot) && sr.equals(secondRoot) && sn === 0;
}

const hex = (a) => a.map((x) => Buffer.from(x, "hex"));

// C2SP signed note: body, blank line, "— name base64(keyhash[4] || signature)" lines
function checkCheckpoint(text, publicKeyB64) {
  const cut = text.indexOf("\n\n");
  const body = text.slice(0, cut + 1);
  const [origin, size, root] = body.split("\n");
  const raw = Buffer.from(publicKeyB64, "base64");
  const spki = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw]);
  const key = createPublicKey({ key: spki, format: "der", type: "spki" });
  const keyHash = sha256(Buffer.from(origin + "\n"), Buffer.from([1]), raw).subarray(0, 4);
  let signed = false;
  for (const line of text.slice(cut + 2).split("\n")) {
    if (!line.startsWith("\u2014 ")) continue;
    const [name, b64] = line.slice(2).split(" ");
    const sig = Buffer.from(b64, "base64");
    if (name === origin && sig.subarray(0, 4).equals(keyHash)) {
      signed ||= verify(null, Buffer.from(body, "utf8"), key, sig.subarray(4));
    }
  }
  return { origin, size: Number(size), root: Buffer.from(root, "base64"), signed };
}

// Mode 1 (test vectors): node verify_log.mjs FILE.json
// Mode 2 (a real export): node verify_log.mjs --export LEDGER.jsonl --public-key B64
//                           [--inclusion PROOF.json] [--consistency PROOF.json]
const argv = process.argv.slice(2);
if (argv[0] === "--export") {
  const opt = {};
  for (let i = 0; i < argv.length; i += 2) opt[argv[i].slice(2)] = argv[i + 1];
  const text = readFileSync(opt.export, "utf8");
  const rows = text.split("\n");
  if (rows[rows.length - 1] === "") rows.pop();
  const header = JSON.parse(rows[0]);
  const entries = rows.slice(1);
  const canonicalOk = entries.every((e) => jcs(JSON.parse(e)) === e) && jcs(header) === rows[0];
  const seqOk = entries.every((e, i) => JSON.parse(e).seq === header.first_seq + i);
  if (header.first_seq !== 1) throw new Error("this check reads unpruned exports");
  const leaves = entries.map((e) => leafHash(Buffer.from(e, "utf8")));
  const root = mth(leaves);
  const heads = header.heads.map((h) => checkCheckpoint(h, opt["public-key"]));
  const last = heads[heads.length - 1];
  const headsOk = heads.every((h) => h.signed && h.origin === header.origin &&
    h.root.equals(mth(leaves.slice(0, h.size))));
  const covering = last.size === entries.length && last.root.equals(root);
  const verdict = { entries: entries.length, canonical: canonicalOk, seq: seqOk,
    root: root.toString("hex"), heads_signed: headsOk, head_covers_export: covering };
  let ok = canonicalOk && seqOk && headsOk && covering;
  if (opt.inclusion) {
    const p = JSON.parse(readFileSync(opt.inclusion, "utf8"));
    const cp = checkCheckpoint(p.checkpoint, opt["public-key"]);
    const line = Buffer.from(p.entry, "utf8");
    verdict.inclusion = cp.signed && entries[p.seq - 1] === p.entry &&
      verifyInclusion(leafHash(line), p.seq - 1, cp.size, hex(p.path), cp.root) &&
      cp.root.equals(mth(leaves.slice(0, cp.size)));
    ok &&= verdict.inclusion;
  }
  if (opt.consistency) {
    const p = JSON.parse(readFileSync(opt.consistency, "utf8"));
    const a = checkCheckpoint(p.old_checkpoint, opt["public-key"]);
    const b = checkCheckpoint(p.checkpoint, opt["public-key"]);
    verdict.consistency = a.signed && b.signed &&
      verifyConsistency(a.size, b.size, a.root, b.root, hex(p.proof)) &&
      a.root.equals(mth(leaves.slice(0, a.size))) && b.root.equals(mth(leaves.slice(0, b.size)));
    ok &&= verdict.consistency;
  }
  console.log(JSON.stringify(verdict));
  process.exit(ok ? 0 : 1);
}

const doc = JSON.parse(readFileSync(process.argv[2], "utf8"));
const lines = doc.entries.map((e) => Buffer.from(e, "utf8"));
const canonical = doc.entries.every((e) => jcs(JSON.parse(e)) === e);
const leaves = lines.map(leafHash);
const leavesOk = leaves.every((h, i) => h.toString("hex") === doc.leaf_hashes[i]);
const root = mth(leaves);
const cp = checkCheckpoint(doc.checkpoint, doc.public_key);
const inc = doc.inclusion;
const inclusion = verifyInclusion(leaves[inc.index], inc.index, inc.size, hex(inc.path), root);
const con = doc.consistency;
const consistency = verifyConsistency(con.old_size, con.size, mth(leaves.slice(0, con.old_size)),
  root, hex(con.proof));
const verdict = {
  entries: lines.length,
  canonical,
  leaf_hashes: leavesOk,
  root: root.toString("hex"),
  root_matches: root.toString("hex") === doc.root && root.equals(cp.root) && cp.size === lines.length,
  checkpoint_signed: cp.signed,
  inclusion,
  consistency,
};
console.log(JSON.stringify(verdict));
const ok = canonical && leavesOk && verdict.root_matches && cp.signed && inclusion && consistency;
process.exit(ok ? 0 : 1);
