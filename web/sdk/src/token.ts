/**
 * When to refresh a JWT: ahead of its `exp`, by a fifth of its remaining life and at most 30 s,
 * so that the `refresh` is in force before the server would close with 4005. The token is only
 * read here (the server verifies it); a token whose payload cannot be read has no known expiry.
 */

export function tokenExpiry(token: string): number | null {
  const part = token.split(".")[1];
  if (part === undefined) return null;
  try {
    const json = atob(part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "="));
    const exp = (JSON.parse(json) as { exp?: unknown }).exp;
    return typeof exp === "number" && Number.isFinite(exp) ? exp * 1000 : null;
  } catch {
    return null;
  }
}

/** The wall-clock time (ms) to refresh a token expiring at `expiresAt` (ms), seen at `now`. */
export function refreshAt(expiresAt: number, now: number): number {
  const left = expiresAt - now;
  return expiresAt - Math.min(30_000, Math.max(left / 5, 0));
}
