/**
 * POST /v1/tools/validate on PostgreSQL, against the baseline of the same run: one instance with 32
 * connections; then two organizations (16 connections each) served by one instance, and by two
 * instances on the same database, one organization each; then one organization served by both
 * instances, which take turns on its one receipt chain. Each organization's chain has one head,
 * moved by one commit at a time, so instances add throughput across organizations, not within one.
 * BENCH_PG_URL selects the server (a fresh schema is created and dropped).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';
import { api, type Child, fmt, load, serviceEnv, startChild } from './lib.js';
import { BODIES, provision } from './validate.js';

const ROOT = join(import.meta.dirname, '..');

export interface PostgresBenchResult {
  oneRps: number;
  twoRps: number;
  ratio: number;
  answered: number;
  recorded: number;
}

async function withSchema<T>(pgUrl: string, run: (url: string) => Promise<T>): Promise<T> {
  const name = `bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  await admin.query(`create schema ${name}`);
  const url = new URL(pgUrl);
  url.searchParams.set('options', `-c search_path=${name}`);
  try {
    return await run(url.toString());
  } finally {
    await admin.query(`drop schema if exists ${name} cascade`);
    await admin.end();
  }
}

const serve = (port: number, dbUrl: string): Promise<Child> =>
  startChild(
    'node',
    [join(ROOT, 'packages/server/bin/svc.js'), 'serve'],
    serviceEnv(port, dbUrl),
    `http://127.0.0.1:${port}/readyz`,
  );

export async function runPostgresBench(opts: {
  pgUrl: string;
  durationS: number;
  port: number;
  baselineRps: number;
}): Promise<PostgresBenchResult> {
  return withSchema(opts.pgUrl, async (dbUrl) => {
    const a = await serve(opts.port, dbUrl);
    let b: Child | null = null;
    try {
      const baseA = `http://127.0.0.1:${opts.port}`;
      const key = await provision(baseA);
      const headers = { 'x-service-api-key': key };
      const target = (base: string, connections: number) => ({
        url: `${base}/v1/tools/validate`,
        connections,
        headers,
        bodies: BODIES,
      });
      let answered = 0;
      answered += (await load({ ...target(baseA, 32), durationS: 3 })).ok;
      const one = await load({ ...target(baseA, 32), durationS: opts.durationS });
      answered += one.ok;
      const ratio = one.rps / opts.baselineRps;
      console.log(
        `validate (PostgreSQL, one instance)   ${fmt(one.rps)} req/s  p50 ${one.p50} ms  p99 ${one.p99} ms  non-2xx ${one.non2xx}  errors ${one.errors}`,
      );
      console.log(`ratio validate/baseline ${ratio.toFixed(2)} (goal >= 0.20)`);

      // Two organizations: one instance, then two instances (one organization each), 16 connections each.
      const key2 = await provision(baseA, 'bench-2');
      const headers2 = { 'x-service-api-key': key2 };
      const pair = async (base1: string, base2: string) => {
        const [x, y] = await Promise.all([
          load({ ...target(base1, 16), durationS: opts.durationS }),
          load({ ...target(base2, 16), headers: headers2, durationS: opts.durationS }),
        ]);
        answered += x.ok + y.ok;
        return { rps: x.rps + y.rps, p99: Math.max(x.p99, y.p99) };
      };
      answered += (await load({ ...target(baseA, 16), headers: headers2, durationS: 2 })).ok;
      const single = await pair(baseA, baseA);
      console.log(`two organizations, one instance         ${fmt(single.rps)} req/s  p99 ${single.p99} ms`);
      b = await serve(opts.port + 2, dbUrl);
      const baseB = `http://127.0.0.1:${opts.port + 2}`;
      answered += (await load({ ...target(baseB, 16), headers: headers2, durationS: 2 })).ok;
      const two = await pair(baseA, baseB);
      const twoRps = two.rps;
      console.log(
        `two organizations, two instances        ${fmt(two.rps)} req/s  p99 ${two.p99} ms  = ${(two.rps / single.rps).toFixed(2)} x one instance`,
      );
      // One organization on both instances, as behind a load balancer: they take turns on one chain.
      const [x, y] = await Promise.all([
        load({ ...target(baseA, 16), durationS: opts.durationS }),
        load({ ...target(baseB, 16), durationS: opts.durationS }),
      ]);
      answered += x.ok + y.ok;
      console.log(
        `one organization, two instances         ${fmt(x.rps + y.rps)} req/s  p99 ${Math.max(x.p99, y.p99)} ms`,
      );
      const listed = await api(baseA, '/v1/decisions?limit=1', { headers });
      const recorded = listed.pagination.total as number;
      const listed2 = await api(baseA, '/v1/decisions?limit=1', { headers: headers2 });
      const recorded2 = recorded + (listed2.pagination.total as number);
      console.log(`answered 2xx ${fmt(answered)}, decisions in the log ${fmt(recorded2)}`);
      return { oneRps: single.rps, twoRps, ratio, answered, recorded: recorded2 };
    } finally {
      await b?.stop();
      await a.stop();
    }
  });
}
