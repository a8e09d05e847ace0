/**
 * Presence by user: who is here, not how many tabs they have open (docs/protocol.md, "Users
 * and instances"; the Python SDK's client_sdk/presence.py).
 *
 * A member of a group is one client instance of a user (a tab, a process, a device), and its
 * member id says both: `user#instance`, or just `user` for a client that names no instance.
 * Views list instances; an application renders users: `usersOf(members)` groups a view's
 * instances by user, `arrivals(users, joined, left)` says which users came (their first instance in)
 * and went (their last one out), as Phoenix Presence reports a user with many metas.
 */

/** The user a member id belongs to (`#` is never part of a user id). */
export function userOf(member: string): string {
  return member.split("#", 1)[0]!;
}

/** Each user of `members` with its instances (member ids), in view order. */
export function usersOf(members: readonly string[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const m of members) {
    const u = userOf(m);
    (out.get(u) ?? out.set(u, []).get(u)!).push(m);
  }
  return out;
}

/**
 * The users a view installed with `joined` and `left` brought in (their first instance) and
 * took out (their last), sorted: a second tab of a user already here is no arrival, closing one
 * of two tabs no departure. `users`: the view's `usersOf`.
 */
export function arrivals(users: Map<string, string[]>, joined: readonly string[], left: readonly string[]): [string[], string[]] {
  const lefts = left.map(userOf);
  return [
    [...users.keys()].filter((u) => !lefts.includes(u) && users.get(u)!.every((m) => joined.includes(m))).sort(),
    [...new Set(lefts)].filter((u) => !users.has(u)).sort(),
  ];
}
