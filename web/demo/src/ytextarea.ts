/**
 * A <textarea> kept equal to a Y.Text. Local input becomes one delete and one insert (the
 * changed middle between the common prefix and suffix); remote changes rewrite the value and
 * carry the caret through the change's delta, so a peer typing before the caret does not move
 * it off the word being typed.
 */

import * as Y from "yjs";

export function bindTextarea(el: HTMLTextAreaElement, text: Y.Text, onLocalEdit: () => void): () => void {
  const local = {}; // the origin of this textarea's own transactions
  el.value = text.toString();

  const onInput = (): void => {
    const before = text.toString();
    const after = el.value;
    let start = 0;
    while (start < before.length && start < after.length && before[start] === after[start]) start++;
    let endB = before.length;
    let endA = after.length;
    while (endB > start && endA > start && before[endB - 1] === after[endA - 1]) {
      endB--;
      endA--;
    }
    if (endB === start && endA === start) return;
    text.doc!.transact(() => {
      if (endB > start) text.delete(start, endB - start);
      if (endA > start) text.insert(start, after.slice(start, endA));
    }, local);
    onLocalEdit();
  };

  const onChange = (ev: Y.YTextEvent, tr: Y.Transaction): void => {
    if (tr.origin === local) return;
    let { selectionStart: s, selectionEnd: e } = el;
    let at = 0;
    for (const d of ev.delta) {
      if (d.retain !== undefined) at += d.retain;
      else if (typeof d.insert === "string") {
        const n = d.insert.length;
        if (at <= s) s += n;
        if (at < e) e += n;
        at += n;
      } else if (d.delete !== undefined) {
        const n = d.delete;
        s = at < s ? Math.max(at, s - n) : s;
        e = at < e ? Math.max(at, e - n) : e;
      }
    }
    const focused = document.activeElement === el;
    el.value = text.toString();
    if (focused) el.setSelectionRange(s, e);
  };

  el.addEventListener("input", onInput);
  text.observe(onChange);
  return () => {
    el.removeEventListener("input", onInput);
    text.unobserve(onChange);
  };
}
