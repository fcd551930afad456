import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SVC_BIN, SVC_FLAGS } from '../../test/bin.js';
import { useTestApp } from '../../test/fixture.js';
import { createTenant, keyHeader, type Tenant } from '../../test/helpers.js';
import { rewriteChain } from '../../test/ledger.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'svc-verify-cp-'));

let tenant: Tenant;

/** Exit code and output of `svc receipts verify`, whatever the code. */
const verify = (args: string[]) =>
  run('node', [...SVC_FLAGS, SVC_BIN, 'receipts', 'verify', ...args], {
    env: { ...process.env, SVC_API_KEY: tenant.apiKey },
  }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({
      code: e.code,
      stdout: e.stdout,
      stderr: e.stderr,
    }),
  );

const save = (name: string, value: unknown) => {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
};

async function decide(n: number) {
  for (let i = 0; i < n; i++) {
    await t.inject({
      method: 'POST',
      url: '/v1/tools/validate',
      headers: keyHeader(tenant.apiKey),
      payload: { tool_name: 'transfer', arguments: { i } },
    });
  }
}

const t = useTestApp({ checkpointIntervalMs: 0 }, { listen: true });
beforeAll(async () => {
  tenant = await createTenant(t);
  await decide(6);
  await t.inject({ method: 'POST', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) });
  await decide(3);
  await t.inject({ method: 'POST', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) });
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
});

describe('svc receipts verify --checkpoints --keys', () => {
  it('verifies the export against the service checkpoints and key set, from URLs and saved files', async () => {
    const live = await verify([
      `${t.url}/v1/receipts/export`,
      '--checkpoints',
      `${t.url}/v1/receipts/checkpoints`,
      '--keys',
      `${t.url}/.well-known/svc-keys.json`,
    ]);
    expect(live.code).toBe(0);
    expect(live.stdout).toMatch(/^OK: 9 receipts verified/);
    expect(live.stdout).toContain('OK: 2 checkpoint(s) verified');

    // A third party keeps copies: the checkpoints as NDJSON and the key set as served.
    const list = (
      await t.inject({ method: 'GET', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    const kept = save('kept.ndjson', list.map((c: object) => JSON.stringify(c)).join('\n'));
    const keys = save(
      'keys.json',
      (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json(),
    );
    const offline = await verify([`${t.url}/v1/receipts/export`, '--checkpoints', kept, '--keys', keys]);
    expect(offline.code).toBe(0);
  });

  it('refuses a checkpoint signed by a key the key set does not publish, and a forged one', async () => {
    const list = (
      await t.inject({ method: 'GET', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) })
    ).json().data;
    const keys = save('empty-keys.json', { keys: [] });
    const unknown = await verify([
      `${t.url}/v1/receipts/export`,
      '--checkpoints',
      save('c.json', list),
      '--keys',
      keys,
    ]);
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toContain('which the key set does not publish');

    const realKeys = save(
      'real-keys.json',
      (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json(),
    );
    const forged = [{ ...list[0], tree_size: list[0].tree_size - 1 }];
    const bad = await verify([
      `${t.url}/v1/receipts/export`,
      '--checkpoints',
      save('f.json', forged),
      '--keys',
      realKeys,
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain('the signature does not match the checkpoint');
  });

  it('detects a history rewritten after a checkpoint was kept, even with every hash recomputed', async () => {
    const kept = save(
      'before.json',
      (
        await t.inject({ method: 'GET', url: '/v1/receipts/checkpoints', headers: keyHeader(tenant.apiKey) })
      ).json(),
    );
    const keys = save(
      'keys-before.json',
      (await t.inject({ method: 'GET', url: '/.well-known/svc-keys.json' })).json(),
    );
    await rewriteChain(t, tenant.orgId, 2, 'nothing happened');
    await decide(1);

    // The rewritten export is consistent in itself…
    const alone = await verify([`${t.url}/v1/receipts/export`]);
    expect(alone.code).toBe(0);
    // …but not with the checkpoints signed before the rewrite.
    const r = await verify([`${t.url}/v1/receipts/export`, '--checkpoints', kept, '--keys', keys]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('FAILED: 2 of 2 checkpoint(s) do not verify');
    expect(r.stdout).toContain('the history was changed after it was signed');
  });

  it('needs --keys with --checkpoints (exit 2)', async () => {
    const r = await verify([
      `${t.url}/v1/receipts/export`,
      '--checkpoints',
      `${t.url}/v1/receipts/checkpoints`,
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--checkpoints and --keys go together');
  });
});
