// Frames into WebSocket messages: several frames in one `batch` where the server takes them.
//
// A server whose `welcome.limits` says `max_batch_frames` handles `batch{frames}` exactly as the
// frames sent one by one, in order (docs/protocol.md). The client packs what it has to send at
// once into as few messages as the limits allow: a WebSocket message per frame saved at both
// ends (issue 34). A message never exceeds the server's `max_frame_bytes` in UTF-8 (the server
// closes a connection on one that does), so a frame too large to share goes alone. The same rule
// as the Python SDK's client_sdk/batching.py.

const HEAD = '{"type":"batch","frames":[';
const utf8 = new TextEncoder();

/** [most frames, most bytes] of one batch this server takes; [1, 0]: it takes none. */
export function batchLimits(limits: Readonly<Record<string, unknown>>): [number, number] {
  const { max_batch_frames: n, max_frame_bytes: size } = limits;
  return typeof n === "number" && n > 1 && typeof size === "number" ? [n, size] : [1, 0];
}

/** Encoded frames, in order, as messages: runs of two or more in a `batch` of at most
 * `maxFrames` frames and `maxBytes` bytes; a frame that shares with no other, alone. */
export function pack(encoded: string[], maxFrames: number, maxBytes: number): string[] {
  const out: string[] = [];
  let run: string[] = [];
  let size = HEAD.length + 1; // the envelope, less the comma its first frame does not need
  const close = (): number => out.push(run.length > 1 ? HEAD + run.join() + "]}" : run[0]!);
  for (const f of encoded) {
    const n = utf8.encode(f).length + 1;
    if (run.length > 0 && (run.length >= maxFrames || size + n > maxBytes)) {
      close();
      run = [];
      size = HEAD.length + 1;
    }
    run.push(f);
    size += n;
  }
  if (run.length > 0) close();
  return out;
}
