import { describe, expect, it } from 'vitest';
import { blockedAddressReason, upstreamHostRefusal } from './ssrf.js';
import { openClient, UpstreamError } from './upstream-client.js';

describe('SSRF guard', () => {
  it('classifies addresses', () => {
    for (const ip of [
      '169.254.169.254',
      '169.254.0.1',
      '100.100.100.200',
      'fe80::1',
      'FE80::abcd%eth0',
      'febf::1',
      'fd00:ec2::254',
      '::ffff:169.254.169.254',
      '::ffff:a9fe:a9fe',
      '::169.254.169.254',
      '64:ff9b::169.254.169.254',
    ]) {
      expect(blockedAddressReason(ip), ip).not.toBeNull();
    }
    for (const ip of [
      '127.0.0.1',
      '10.0.0.1',
      '192.168.1.1',
      '::1',
      '::',
      'fd00::1',
      'fec0::1',
      '::ffff:127.0.0.1',
      '8.8.8.8',
    ]) {
      expect(blockedAddressReason(ip), ip).toBeNull();
    }
  });

  it('refuses 6to4 and Teredo addresses whose embedded IPv4 address is refused', () => {
    for (const ip of [
      // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
      '2002:a9fe:a9fe::1',
      '2002:A9FE:A9FE::',
      '2002:a9fe:1::',
      '2002:6464:64c8:1::1',
      '2002:c000:c0::',
      '[2002:a9fe:a9fe::1]',
      // Teredo: the last 32 bits are the client's address inverted (169.254.169.254 is 5601:5601).
      '2001:0:4136:e378:8000:63bf:5601:5601',
      '2001::5601:5601',
      '2001:0:4136:e378:8000:63bf:86.1.86.1',
      '2001::9b9b:9b37',
      '2001:0000:0:0:0:0:3fff:ff3f',
    ]) {
      expect(blockedAddressReason(ip), ip).not.toBeNull();
    }
    expect(blockedAddressReason('2002:a9fe:a9fe::1')).toMatch(/169\.254\.169\.254 is link-local/);
    expect(blockedAddressReason('2001::9b9b:9b37')).toMatch(/100\.100\.100\.200 is a cloud metadata/);
    for (const ip of [
      '2002:a00:1::1',
      '2002:7f00:1::',
      '2002:808:808::',
      // RFC 4380's example: a client at 192.0.2.45.
      '2001:0:4136:e378:8000:63bf:3fff:fdd2',
      '2001::',
      // Not Teredo (2001:db8::/32, documentation): the same last 32 bits mean nothing.
      '2001:db8::5601:5601',
      '2001:1::5601:5601',
      // Not 6to4.
      '2003:a9fe:a9fe::1',
    ]) {
      expect(blockedAddressReason(ip), ip).toBeNull();
    }
  });

  it('refuses a name resolving to a 6to4 or Teredo form of a metadata address', async () => {
    const lookup = async (host: string) =>
      host === 'six.example' ? ['2002:a9fe:a9fe::1'] : ['2001:0:4136:e378:8000:63bf:5601:5601'];
    const opts = { allowPrivate: false, lookup };
    expect(await upstreamHostRefusal(new URL('http://six.example/mcp'), opts)).toMatch(
      /resolves to 169\.254\.169\.254/,
    );
    expect(await upstreamHostRefusal(new URL('http://teredo.example/mcp'), opts)).toMatch(
      /resolves to 169\.254\.169\.254/,
    );
    expect(await upstreamHostRefusal(new URL('http://[2002:a9fe:a9fe::1]/mcp'), opts)).toMatch(
      /169\.254\.169\.254/,
    );
  });

  it('resolves names, so a name pointing at metadata is refused', async () => {
    const lookup = async (host: string) =>
      host === 'evil.example' ? ['10.0.0.1', '169.254.169.254'] : ['10.0.0.2'];
    const opts = { allowPrivate: false, lookup };
    expect(await upstreamHostRefusal(new URL('http://evil.example/mcp'), opts)).toMatch(
      /resolves to 169\.254\.169\.254/,
    );
    expect(await upstreamHostRefusal(new URL('http://fine.example/mcp'), opts)).toBeNull();
    expect(
      await upstreamHostRefusal(new URL('http://evil.example/mcp'), { ...opts, allowPrivate: true }),
    ).toBeNull();
    const failing = async () => {
      throw Object.assign(new Error('nx'), { code: 'ENOTFOUND' });
    };
    // Unresolvable when saved: allowed, checked again when connecting, where it fails.
    expect(
      await upstreamHostRefusal(new URL('http://nx.example/'), { allowPrivate: false, lookup: failing }),
    ).toBeNull();
    expect(
      await upstreamHostRefusal(new URL('http://nx.example/'), {
        allowPrivate: false,
        lookup: failing,
        requireResolution: true,
      }),
    ).toMatch(/could not be resolved \(ENOTFOUND\)/);
  });

  it('checks again when connecting (DNS may have changed since the URL was saved)', async () => {
    const lookup = async () => ['169.254.169.254'];
    const target = {
      id: 'x',
      transport: 'mcp-streamable-http' as const,
      url: 'http://rebound.example/mcp',
      headers: {},
      timeoutMs: 1000,
    };
    const err = await openClient(target, { allowPrivate: false, lookup }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect((err as UpstreamError).kind).toBe('refused');
  });
});
