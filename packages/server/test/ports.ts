import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** The lowest port the system hands out for port 0 and for outgoing connections. */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 0) return low;
  } catch {
    // Not Linux: the IANA range.
  }
  return 49152;
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A loopback port free right now, for a child process that is told its port by number. It is drawn
 * at random from 10000 up to the system's ephemeral range, so a server listening on port 0 or an
 * outgoing connection (of this run or of another beside it) cannot take it before the child
 * listens; where that range starts too low to leave room, the system chooses.
 */
export async function freePort(): Promise<number> {
  const high = ephemeralLow();
  if (high - 10_000 >= 1_000) {
    for (let attempt = 0; attempt < 50; attempt++) {
      const port = randomInt(10_000, high);
      if (await canListen(port)) return port;
    }
  }
  return closedPort();
}

/** A loopback port nothing listens on: one the system chose for port 0, given back. */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}
