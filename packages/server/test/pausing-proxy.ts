import { type AddressInfo, createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/**
 * A TCP proxy to a local server that can stop forwarding, to stand for a network partition: while
 * paused it still accepts connections, but nothing goes through in either direction and no
 * connection is closed, so clients see neither data nor an error (as with a link that went dark).
 * resume() delivers what was held back, as a healed partition would.
 */
export class PausingProxy {
  private paused = false;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;
  private listening = 0;

  private constructor(
    private readonly targetPort: number,
    paused: boolean,
  ) {
    this.paused = paused;
    this.server = createServer((client) => this.accept(client));
  }

  static async start(targetPort: number, options: { paused?: boolean } = {}): Promise<PausingProxy> {
    const proxy = new PausingProxy(targetPort, options.paused ?? false);
    await new Promise<void>((r) => proxy.server.listen(0, '127.0.0.1', () => r()));
    proxy.listening = (proxy.server.address() as AddressInfo).port;
    return proxy;
  }

  get port(): number {
    return this.listening;
  }

  private accept(client: Socket): void {
    const upstream = tcpConnect(this.targetPort, '127.0.0.1');
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const [from, to] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(from);
      from.on('data', (chunk: Buffer) => {
        if (this.paused) {
          // Held back until resume(): a chunk read before the pause took effect is not lost.
          from.pause();
          from.unshift(chunk);
          return;
        }
        to.write(chunk);
      });
      from.on('error', end);
      from.on('close', () => {
        this.sockets.delete(from);
        end();
      });
      if (this.paused) from.pause();
    }
  }

  /** The URL with its host and port replaced by the proxy's. */
  url(target: string): string {
    const u = new URL(target);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  pause(): void {
    this.paused = true;
    for (const s of this.sockets) s.pause();
  }

  resume(): void {
    this.paused = false;
    for (const s of this.sockets) s.resume();
  }

  /** Cuts every connection and stops listening. */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/** How long `run` took, in ms, and how it settled: its value, or its error. */
export async function timed<T>(run: () => Promise<T>): Promise<{ ms: number; value?: T; error?: Error }> {
  const started = performance.now();
  try {
    const value = await run();
    return { ms: performance.now() - started, value };
  } catch (error) {
    return { ms: performance.now() - started, error: error as Error };
  }
}
