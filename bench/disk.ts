import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteHandle } from '../packages/server/src/storage/db.js';

/**
 * Latency of a one-row commit with the service's SQLite settings (WAL, synchronous=FULL) on this
 * disk: back to back, or with `gapMs` of idle disk before each commit, as when one call is in flight
 * and each commit follows a wait for an upstream (on some virtual disks a flush after an idle
 * moment takes several times longer than one right after another).
 */
export async function diskCommitLatency(commits = 200, gapMs = 0): Promise<{ p50: number; p99: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-disk-'));
  const db = openSqliteHandle(join(dir, 'probe.db'));
  try {
    db.exec('CREATE TABLE t (x TEXT)');
    const insert = db.prepare('INSERT INTO t VALUES (?)');
    const tx = db.transaction(() => insert.run('x'.repeat(500)));
    const ms: number[] = [];
    for (let i = 0; i < commits; i++) {
      const t = process.hrtime.bigint();
      tx.immediate();
      ms.push(Number(process.hrtime.bigint() - t) / 1e6);
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    }
    ms.sort((a, b) => a - b);
    return { p50: ms[Math.floor(commits * 0.5)]!, p99: ms[Math.floor(commits * 0.99)]! };
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
