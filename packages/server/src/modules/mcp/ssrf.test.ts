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
