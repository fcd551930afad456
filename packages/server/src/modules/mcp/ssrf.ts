import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';

/**
 * SSRF guard for upstream URLs. An upstream URL is chosen by a tenant but fetched by the service, so
 * it must not reach the cloud instance-metadata endpoints (which hand out credentials) or anything
 * link-local. Loopback and private ranges stay allowed: self-hosted MCP servers live there.
 */

/** Resolves a host name to its addresses. Injected in tests. */
export type Lookup = (host: string) => Promise<string[]>;

export const systemLookup: Lookup = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

// Well-known names of metadata services (GCP, AWS); their addresses are link-local anyway.
const METADATA_NAMES = new Set([
  'metadata',
  'metadata.google.internal',
  'metadata.goog',
  'instance-data',
  'instance-data.ec2.internal',
]);

// Metadata addresses outside 169.254.0.0/16: Alibaba Cloud, Oracle Cloud Classic.
const METADATA_V4 = new Set(['100.100.100.200', '192.0.0.192']);

function parseIpv4(s: string): number | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return null;
    n = n * 256 + Number(p);
  }
  return n;
}

/** Eight 16-bit groups, or null. Accepts "::", an embedded dotted IPv4 tail and a zone id. */
function parseIpv6(input: string): number[] | null {
  let s = input
    .replace(/^\[|\]$/g, '')
    .split('%')[0]!
    .toLowerCase();
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted) {
    const v4 = parseIpv4(dotted[2]!);
    if (v4 === null) return null;
    s = `${dotted[1]}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const group = (h: string) => (h === '' ? [] : h.split(':'));
  const head = group(halves[0]!);
  const tail = halves.length === 2 ? group(halves[1]!) : [];
  const missing = 8 - head.length - tail.length;
  if ((halves.length === 1 && missing !== 0) || missing < 0) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...tail];
  if (all.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return null;
  return all.map((g) => Number.parseInt(g, 16));
}

const v4Text = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');

function ipv4Reason(n: number): string | null {
  if (n >>> 16 === (169 << 8) + 254) return `${v4Text(n)} is link-local (169.254.0.0/16, cloud metadata)`;
  if (METADATA_V4.has(v4Text(n))) return `${v4Text(n)} is a cloud metadata address`;
  return null;
}

/** Why an IP address is refused as an upstream, or null when it is allowed. */
export function blockedAddressReason(ip: string): string | null {
  const kind = isIP(ip.replace(/^\[|\]$/g, '').split('%')[0]!);
  if (kind === 4) return ipv4Reason(parseIpv4(ip)!);
  if (kind !== 6) return null;
  const g = parseIpv6(ip);
  if (!g) return null;
  if ((g[0]! & 0xffc0) === 0xfe80) return `${ip} is link-local (fe80::/10)`;
  if (g[0] === 0xfd00 && g[1] === 0xec2 && g.slice(2, 7).every((x) => x === 0) && g[7] === 0x254) {
    return `${ip} is the AWS metadata address`;
  }
  // IPv4 carried inside IPv6 (mapped ::ffff:a.b.c.d, compatible ::a.b.c.d, NAT64 64:ff9b::/96).
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  const embedded =
    (zeros(0, 5) && g[5] === 0xffff) ||
    (zeros(0, 6) && (g[6] !== 0 || g[7]! > 1)) ||
    (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6));
  if (embedded) return ipv4Reason(((g[6]! << 16) | g[7]!) >>> 0);
  // 6to4 (2002::/16): bits 16-47 are the IPv4 address of the site's 6to4 router, where packets for
  // the address are sent, encapsulated in IPv4.
  if (g[0] === 0x2002) return ipv4Reason(((g[1]! << 16) | g[2]!) >>> 0);
  // Teredo (2001:0000::/32): the last 32 bits are the client's IPv4 address with every bit inverted;
  // packets for the address are sent to it (bits 32-63, the Teredo server, are not).
  if (g[0] === 0x2001 && g[1] === 0) return ipv4Reason(~((g[6]! << 16) | g[7]!) >>> 0);
  return null;
}

export interface GuardOptions {
  allowPrivate: boolean;
  lookup?: Lookup;
  /** At create/update an unresolvable name passes (it is checked again at connect); at connect it fails. */
  requireResolution?: boolean;
}

/** Why the URL's host is refused, or null. Resolves names, so a name pointing at metadata is caught. */
export async function upstreamHostRefusal(url: URL, options: GuardOptions): Promise<string | null> {
  if (options.allowPrivate) return null;
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  const literal = host.replace(/^\[|\]$/g, '');
  if (isIP(literal)) return blockedAddressReason(literal);
  if (METADATA_NAMES.has(host)) return `${host} is a cloud metadata host name`;
  let addresses: string[];
  try {
    addresses = await (options.lookup ?? systemLookup)(host);
  } catch (err) {
    if (!options.requireResolution) return null;
    return `${host} could not be resolved (${(err as NodeJS.ErrnoException).code ?? 'DNS error'})`;
  }
  for (const a of addresses) {
    const why = blockedAddressReason(a);
    if (why) return `${host} resolves to ${why}`;
  }
  return null;
}

export const ALLOW_PRIVATE_HINT = 'set SVC_MCP_ALLOW_PRIVATE_UPSTREAMS=true to allow it';
