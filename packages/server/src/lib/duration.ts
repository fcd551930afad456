/** Parses "90s", "15m", "1h", "7d" into seconds. */
export function parseTtl(ttl: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(ttl.trim());
  if (!m) throw new Error(`invalid TTL "${ttl}": use a number with s, m, h or d`);
  const n = Number(m[1]);
  const unit = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  return n * unit;
}
