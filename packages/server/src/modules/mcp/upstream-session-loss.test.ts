import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { type Everything, startEverything } from '../../../test/mcp-everything.js';
import { createHttpFetch } from './http-fetch.js';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { UpstreamError } from './upstream-error.js';
import { UpstreamSession } from './upstream-session.js';

/**
 * The reference server killed (SIGKILL) while a call is in flight, over either transport: the call
 * fails at once, not at its timeout, and the session is over. The sockets are the gateway's own.
 */
let everything: Everything | null = null;
const http = createHttpFetch({ allowPrivate: true });
afterEach(async () => {
  await everything?.stop();
  everything = null;
});
afterAll(() => http.close());

describe.each([
  // The event stream is the session: its loss ends the session at once.
  ['HTTP+SSE', 'sse', 'mcp-sse', true],
  // The call's answer is an SSE stream of its own (progress, then the result): its end fails the
  // call, and the session ends at the next request, which finds nobody to connect to.
  ['Streamable HTTP', 'streamableHttp', 'mcp-streamable-http', false],
] as const)('an upstream session over %s', (_name, mode, transport, endsAtOnce) => {
  it('fails the request in flight and ends when the upstream dies', async () => {
    const up = await startEverything(mode);
    everything = up;
    const closed: string[] = [];
    const { session } = await UpstreamSession.open(
      {
        id: 'u1',
        transport,
        url: up.url,
        headers: {},
        timeoutMs: 10_000,
      },
      { allowPrivate: true, fetch: http.fetch, request: http.request, standaloneStream: false },
      DEFAULT_UPSTREAM_LIMITS,
      { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
      { message: () => true, closed: (why) => closed.push(why) },
    );
    try {
      session.notify('notifications/initialized', undefined);
      const call = session.request('tools/call', {
        name: 'trigger-long-running-operation',
        arguments: { duration: 8, steps: 2 },
      });
      const outcome = call.done.then(
        () => null,
        (e: unknown) => e,
      );
      const started = Date.now();
      await new Promise((r) => setTimeout(r, 300));
      // Stopped once only: a killed child has no exit code, so a second stop would wait forever.
      everything = null;
      await up.stop();
      const err = await outcome;
      expect(err).toBeInstanceOf(UpstreamError);
      expect((err as UpstreamError).kind).toBe('unreachable');
      expect(Date.now() - started).toBeLessThan(3000);
      if (endsAtOnce) expect(closed).toEqual([expect.stringMatching(/^the upstream event stream was lost/)]);
      else expect(closed).toEqual([]);
      // Nothing more goes out on a lost session.
      await expect(session.request('tools/list', undefined).done).rejects.toMatchObject({
        kind: 'unreachable',
      });
      expect(closed).toHaveLength(1);
      expect(session.closedReason).not.toBeNull();
    } finally {
      await session.close();
    }
  });
});
