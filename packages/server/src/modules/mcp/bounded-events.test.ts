import { describe, expect, it } from 'vitest';
import { DEFAULT_UPSTREAM_LIMITS } from './model.js';
import { boundedUpstreamFetch } from './upstream-client.js';

/**
 * What boundedUpstreamFetch passes on of an SSE body (HTTP+SSE upstreams, read then by the SDK's
 * transport), chunk by chunk: one whole event a chunk, whatever the upstream's chunks are; an event
 * ended by a CR alone goes on at once, ended by CRLF; a batch goes on as its messages.
 */
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** An SSE body the test writes chunk by chunk, and what boundedUpstreamFetch makes of it. */
async function sseBody() {
  let upstream!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      upstream = controller;
    },
  });
  const fetch = boundedUpstreamFetch(
    async () => new Response(body, { headers: { 'content-type': 'text/event-stream' } }),
    DEFAULT_UPSTREAM_LIMITS,
    { oversize: () => {}, refused: () => {} },
  );
  const reader = (await fetch('http://upstream.test/sse')).body!.getReader();
  return {
    write: (text: string) => upstream.enqueue(encoder.encode(text)),
    end: () => upstream.close(),
    /** The next chunk passed on (null: the body ended); fails when none comes at once. */
    next: async (): Promise<string | null> => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('nothing was passed on')), 1000);
      });
      try {
        const read = await Promise.race([reader.read(), late]);
        return read.done ? null : decoder.decode(read.value);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Every chunk passed on of a body sent as `chunks`. */
async function passedOn(chunks: string[]): Promise<string[]> {
  const sse = await sseBody();
  for (const chunk of chunks) sse.write(chunk);
  sse.end();
  const out: string[] = [];
  for (let chunk = await sse.next(); chunk !== null; chunk = await sse.next()) out.push(chunk);
  return out;
}

describe('SSE line ends split between chunks (mcp-sse)', () => {
  it('reads a data line’s CRLF split between chunks as one line end: the event goes on whole', async () => {
    // Two line ends there would be a blank line, ending the event halfway through its JSON.
    expect(await passedOn(['data: {"jsonrpc":"2.0",\r', '\ndata: "id":1,"result":{}}\r\n\r\n'])).toEqual([
      'data: {"jsonrpc":"2.0",\r\ndata: "id":1,"result":{}}\r\n\r\n',
    ]);
  });

  it('passes an event ending on a CR that ends the chunk at once, and sends the LF starting the next chunk once', async () => {
    const sse = await sseBody();
    sse.write('data: 1\r\r');
    // Ended by CRLF: the reader would hold a last CR alone until it sees what follows.
    expect(await sse.next()).toBe('data: 1\r\r\n');
    // That LF was the rest of the CRLF: it is not sent again, as a blank line of its own.
    sse.write('\ndata: 2\r\n\r\n');
    expect(await sse.next()).toBe('data: 2\r\n\r\n');
    sse.end();
    expect(await sse.next()).toBeNull();
  });

  it('keeps the LF starting a chunk after an event ended by a whole CRLF', async () => {
    const sse = await sseBody();
    sse.write('data: 1\r\n\r\n');
    expect(await sse.next()).toBe('data: 1\r\n\r\n');
    sse.write('\ndata: 2\n\n');
    expect(await sse.next()).toBe('\ndata: 2\n\n');
    sse.end();
    expect(await sse.next()).toBeNull();
  });

  it('passes an event ended by a CR alone in the middle of a chunk at once, ended by CRLF', async () => {
    const sse = await sseBody();
    sse.write('data: 1\r\r: more');
    expect(await sse.next()).toBe('data: 1\r\r\n');
    sse.write(' to come\n\n');
    expect(await sse.next()).toBe(': more to come\n\n');
    sse.end();
    expect(await sse.next()).toBeNull();
  });

  it('passes the same events wherever the chunks split', async () => {
    const text =
      'event: message\r\ndata: {"a":1}\r\n\r\n\ndata: 2\n\ndata: 3\r\rdata: 4\r\ndata: 5\r\n\r\n: end\r';
    // An event ended by a CR alone goes on ended by CRLF (the last one too, at the end of the body).
    const events = [
      'event: message\r\ndata: {"a":1}\r\n\r\n',
      '\ndata: 2\n\n',
      'data: 3\r\r\n',
      'data: 4\r\ndata: 5\r\n\r\n',
      ': end\r\n',
    ];
    for (let at = 0; at <= text.length; at++) {
      const out = await passedOn([text.slice(0, at), text.slice(at)]);
      expect({ at, out }).toEqual({ at, out: events });
    }
  });
});

describe('a batch in one SSE event (mcp-sse)', () => {
  it('goes on as its messages, in one chunk; elements that are not objects are left out', async () => {
    const note = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}';
    const result = '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}';
    expect(
      await passedOn([`event: message\ndata: [1,"x",null,true,[${note}],${note},${result}]\n\n`]),
    ).toEqual([`event: message\ndata: ${note}\n\nevent: message\ndata: ${result}\n\n`]);
  });
});
