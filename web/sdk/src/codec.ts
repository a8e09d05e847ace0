/**
 * Snapshots on the wire (docs/protocol.md, "State transfer"): zlib-compressed, cut into chunks
 * of at most 256 KiB, each base64; the last carries the SHA-256 (hex) of the uncompressed
 * snapshot. The same format as `state_transfer/codec.py`, with the platform's own streams
 * (`CompressionStream("deflate")` is the zlib format) and `crypto.subtle`, so the SDK carries no
 * inflate code of its own.
 */

import { fromBase64, toBase64 } from "./base64.js";

export const CHUNK_BYTES = 256 * 1024;

/** What a decoded snapshot may grow to (a bound on memory, like the server's). */
export const DEFAULT_MAX_SNAPSHOT = 256 * 1024 * 1024;

export interface EncodedChunk {
  readonly index: number;
  readonly last: boolean;
  readonly data: string;
  readonly sha256: string | null;
}

export class SnapshotError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SnapshotError";
  }
}

/** Compress and cut `snapshot` into chunks. */
export async function encodeSnapshot(snapshot: Uint8Array, chunkBytes = CHUNK_BYTES): Promise<EncodedChunk[]> {
  const [digest, packed] = await Promise.all([sha256Hex(snapshot), pipe(snapshot, new CompressionStream("deflate"))]);
  const pieces: Uint8Array[] = [];
  for (let i = 0; i < packed.length; i += chunkBytes) pieces.push(packed.subarray(i, i + chunkBytes));
  if (!pieces.length) pieces.push(new Uint8Array(0));
  const last = pieces.length - 1;
  return pieces.map((p, i) => ({ index: i, last: i === last, data: toBase64(p), sha256: i === last ? digest : null }));
}

/** Join, inflate and check the chunks of one transfer. Throws `SnapshotError`. */
export async function decodeSnapshot(
  chunks: readonly string[],
  sha256: string | null,
  maxBytes = DEFAULT_MAX_SNAPSHOT,
): Promise<Uint8Array> {
  if (sha256 === null) throw new SnapshotError("the last chunk has no sha256");
  let packed: Uint8Array;
  try {
    packed = concat(chunks.map(fromBase64));
  } catch {
    throw new SnapshotError("a chunk is not base64");
  }
  let snapshot: Uint8Array;
  try {
    snapshot = await pipe(packed, new DecompressionStream("deflate"), maxBytes);
  } catch (e) {
    if (e instanceof SnapshotError) throw e;
    throw new SnapshotError(`does not decompress: ${String(e)}`);
  }
  const digest = await sha256Hex(snapshot);
  if (digest !== sha256.toLowerCase()) throw new SnapshotError("sha256 mismatch");
  return snapshot;
}

export async function sha256Hex(data: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>));
  let hex = "";
  for (const b of digest) hex += b.toString(16).padStart(2, "0");
  return hex;
}

async function pipe(
  input: Uint8Array,
  transform: CompressionStream | DecompressionStream,
  maxBytes = Infinity,
): Promise<Uint8Array> {
  const writer = transform.writable.getWriter();
  // Errors surface on the reading side; the writer's promises must not go unhandled.
  writer.write(input as Uint8Array<ArrayBuffer>).catch(() => undefined);
  writer.close().catch(() => undefined);
  const reader = transform.readable.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw new SnapshotError(`the snapshot is over ${maxBytes} bytes`);
    }
    parts.push(value);
  }
  return concat(parts);
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
