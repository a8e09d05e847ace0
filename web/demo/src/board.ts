/**
 * The board's state and its reducer. Every member applies the same total-order messages in the
 * same order (G3), so `reduce` needs no merging, no clocks and no conflict rules of its own: the
 * first `claim` of a card wins everywhere, and a `move` of a card deleted before it is a no-op
 * everywhere. It must stay deterministic: no `Date.now()`, no randomness, no reading the page.
 */

export const COLUMNS = ["todo", "doing", "done"] as const;
export type Column = (typeof COLUMNS)[number];

export interface Card {
  id: string;
  title: string;
  column: Column;
  /** the user who added it (the user of the message's sender) */
  by: string;
  /** the user who claimed it: any of its instances (tabs) may release it */
  claimedBy: string | null;
}

export interface BoardState {
  /** in the order they were added */
  cards: Card[];
}

export type Op =
  | { op: "add"; id: string; title: string }
  | { op: "move"; id: string; column: Column }
  | { op: "delete"; id: string }
  /** `by` says who, for readers of the log; the reducer takes the sender's user */
  | { op: "claim"; id: string; by: string }
  | { op: "release"; id: string; by: string };

export function emptyBoard(): BoardState {
  return { cards: [] };
}

/** The payload as an op, or null when it is not one of ours. */
export function asOp(payload: unknown): Op | null {
  if (payload === null || typeof payload !== "object") return null;
  const p = payload as Record<string, unknown>;
  if (typeof p.id !== "string" || p.id === "") return null;
  switch (p.op) {
    case "add":
      return typeof p.title === "string" ? { op: "add", id: p.id, title: p.title.slice(0, 200) } : null;
    case "move":
      return (COLUMNS as readonly unknown[]).includes(p.column) ? { op: "move", id: p.id, column: p.column as Column } : null;
    case "delete":
      return { op: "delete", id: p.id };
    case "claim":
    case "release":
      return typeof p.by === "string" ? { op: p.op, id: p.id, by: p.by } : null;
    default:
      return null;
  }
}

/** The state after `op`, sent by an instance of `user` (`userOf(message.sender)`: cards and
 * claims belong to users, not tabs); `state` is not modified. */
export function reduce(state: BoardState, op: Op, user: string): BoardState {
  const at = state.cards.findIndex((c) => c.id === op.id);
  const card = at < 0 ? undefined : state.cards[at];
  const replace = (c: Card): BoardState => ({ cards: state.cards.map((x, i) => (i === at ? c : x)) });
  switch (op.op) {
    case "add":
      if (card !== undefined) return state; // the same id twice: the first one stands
      return { cards: [...state.cards, { id: op.id, title: op.title, column: "todo", by: user, claimedBy: null }] };
    case "move":
      return card === undefined || card.column === op.column ? state : replace({ ...card, column: op.column });
    case "delete":
      return card === undefined ? state : { cards: state.cards.filter((c) => c.id !== op.id) };
    case "claim":
      // First come, first served: the total order decides who was first, the same for everyone.
      return card === undefined || card.claimedBy !== null ? state : replace({ ...card, claimedBy: user });
    case "release":
      return card === undefined || card.claimedBy !== user ? state : replace({ ...card, claimedBy: null });
  }
}

/** Why `op` would change nothing (for the claimer's message), or null if it applies. */
export function refusal(state: BoardState, op: Op): string | null {
  const card = state.cards.find((c) => c.id === op.id);
  if (card === undefined) return "the card is gone";
  if (op.op === "claim" && card.claimedBy !== null) return `already claimed by ${card.claimedBy}`;
  return null;
}

/** JSON with sorted keys: the same state gives the same text on every page. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export function encodeBoard(state: BoardState): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(state));
}

export function decodeBoard(bytes: Uint8Array): BoardState {
  if (!bytes.length) return emptyBoard();
  const parsed = JSON.parse(new TextDecoder().decode(bytes)) as { cards?: unknown };
  if (!Array.isArray(parsed.cards)) throw new Error("not a board snapshot");
  return { cards: parsed.cards as Card[] };
}
