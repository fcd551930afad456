import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import {
  type Checkpoint,
  checkCheckpoints,
  formatCheckpointResults,
  formatReport,
  linesOf,
  type PublicJwk,
  verifyReceiptChain,
} from '@svc/sdk/verify';
import { formatSeconds, loadConfig } from './config.js';
import { parseTtl } from './lib/duration.js';
import { LOGIN_LINK_MAX_TTL_SECONDS } from './modules/sessions/model.js';
import type { Store } from './storage/db.js';

// The server, the store and JWT signing load only for the commands that use them, so offline
// commands (receipts verify) start quickly.
const loadServer = () => import('./server.js');
const loadStorage = async () => ({
  ...(await import('./storage/db.js')),
  ...(await import('./storage/migrate.js')),
});

const USAGE = `Usage: svc <command>

Commands:
  serve                          run the HTTP service (migrates the store first)
  migrate                        apply pending migrations and exit
  token --sub USER [--ttl 1h]    print a user JWT signed with the server's HS256 secret
  login-link --sub USER [--ttl 15m]
                                 print a one-time dashboard sign-in link under SVC_BASE_URL
  receipts verify <file|url|-> [--api-key KEY] [--after N]
                 [--checkpoints <file|url> --keys <file|url>]
                                 verify an NDJSON receipt export offline (a file, stdin, or a
                                 GET /v1/receipts/export URL; the key defaults to SVC_API_KEY);
                                 with checkpoints (saved JSON or GET /v1/receipts/checkpoints)
                                 and a key set (saved JWKS or /.well-known/svc-keys.json), also
                                 their signatures and that the export matches each of them;
                                 exit 0 intact, 1 broken, 2 usage or I/O error
  keys list                      list the signing keys (active, retired, published until)
  keys rotate                    generate a new signing key; the previous one stays published
                                 for SVC_SIGNING_KEY_OVERLAP (default 30d); on a store without
                                 a key, create its first one
  help [command]                 show this help, or that command's usage (also svc <command> --help)

Exit codes: 0 done, 1 failed (including an invalid configuration), 2 usage error (an unknown
command, option or argument, a missing or invalid value); receipts verify: 1 broken chain.

Configuration comes from the environment (see README.md).`;

/** A mistake in the command line: printed with the command's usage, exit code 2 (1 is a failure to do it). */
export class UsageError extends Error {}

/** How long `svc token` tokens may live: at least a second, at most 366 days. */
export const TOKEN_MAX_TTL_SECONDS = 366 * 86_400;

/**
 * The first option given more than once that takes one value, or null. parseArgs keeps the last
 * value given and drops the others unnoticed: `--sub alice --sub bob` would act for bob.
 */
function repeatedOption(
  tokens: readonly { kind: string; name?: string }[],
  options: NonNullable<ParseArgsConfig['options']>,
): string | null {
  const seen = new Set<string>();
  for (const t of tokens) {
    if (t.kind !== 'option' || !t.name || options[t.name]?.multiple) continue;
    if (seen.has(t.name)) return `--${t.name}`;
    seen.add(t.name);
  }
  return null;
}

/** The message for an option given more than once. */
const givenTwice = (option: string) => `${option} is given more than once; it takes one value`;

/**
 * The command's options and positionals (strict: an unknown option, an option given twice, or more
 * positionals than `maxPositionals`, is a usage error naming it).
 */
function parseCommand<O extends NonNullable<ParseArgsConfig['options']>>(
  args: string[],
  options: O,
  maxPositionals = 0,
) {
  let parsed: ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true }>>;
  let tokens: readonly { kind: string; name?: string }[];
  try {
    ({ tokens, ...parsed } = parseArgs({
      args,
      options,
      allowPositionals: true,
      strict: true,
      tokens: true,
    }));
  } catch (err) {
    // Node's message names the option; its advice about `--` is not needed here.
    throw new UsageError((err as Error).message.replace(/\. To specify a positional argument[\s\S]*$/, ''));
  }
  const repeated = repeatedOption(tokens, options);
  if (repeated) throw new UsageError(givenTwice(repeated));
  if (parsed.positionals.length > maxPositionals) {
    const extra = parsed.positionals.slice(maxPositionals).map((a) => `"${a}"`);
    throw new UsageError(`unexpected argument${extra.length > 1 ? 's' : ''} ${extra.join(' ')}`);
  }
  return parsed;
}

/** --ttl: a duration ("90s", "15m", "1h", "7d") between 1 second and `max` seconds. */
function ttlOption(value: string, max: number): number {
  let ttl: number;
  try {
    ttl = parseTtl(value);
  } catch {
    throw new UsageError(`--ttl must be a duration such as 90s, 15m, 1h or 7d, got "${value}"`);
  }
  if (!(ttl >= 1 && ttl <= max)) {
    throw new UsageError(`--ttl must be between 1s and ${formatSeconds(max)}, got "${value}"`);
  }
  return ttl;
}

async function serve(args: string[]): Promise<void> {
  parseCommand(args, {});
  const config = loadConfig();
  const { startServer } = await loadServer();
  let drain: ((code: number) => void) | null = null;
  const server = await startServer(config, {
    // Another process took the store over (it is logged): stop as on SIGTERM, and exit 1.
    onOwnershipLost: () => drain?.(1),
  });
  let draining = false;
  drain = (code) => {
    if (draining) return;
    draining = true;
    server.stop().then(
      () => process.exit(code),
      (err) => {
        server.app.log.error({ err }, 'error while shutting down');
        process.exit(1);
      },
    );
  };
  let signals = 0;
  const shutdown = (signal: string) => {
    signals++;
    if (signals > 1) process.exit(1);
    server.app.log.info({ signal }, 'draining in-flight requests');
    drain?.(0);
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

async function migrate(args: string[]): Promise<void> {
  parseCommand(args, {});
  const { openStore, migrateToLatest } = await loadStorage();
  const store = openStore(loadConfig().databaseUrl);
  try {
    const applied = await migrateToLatest(store);
    console.log(applied.length ? `applied: ${applied.join(', ')}` : 'already up to date');
  } finally {
    await store.close();
  }
}

/**
 * The user id `--sub` names, as the server accepts one (lib/schemas.ts isUserId): it refuses a
 * token or link naming anyone else, so none is printed.
 */
async function subOption(sub: string | undefined): Promise<string> {
  if (!sub) throw new UsageError('--sub USER is required');
  const { isUserId } = await import('./lib/schemas.js');
  if (!isUserId(sub)) throw new UsageError('--sub must be 1-200 characters without control characters');
  return sub;
}

/**
 * Refuses a store in memory for a command whose work is kept in the store: it lives only as long as
 * this process, so no server would ever see what the command made there.
 */
function persistentStore(databaseUrl: string, what: string): void {
  if (databaseUrl !== 'sqlite::memory:') return;
  throw new Error(
    `SVC_DATABASE_URL is sqlite::memory:, a store that ends with this command: ${what}; ` +
      "point SVC_DATABASE_URL at the server's store",
  );
}

/**
 * The store the server uses, for a command that works on it (token, login-link, keys). It must exist
 * (SQLite: nothing is created, not even its folder) and be migrated to this version of svc. A command
 * run from another folder, or given a mistyped path, used to create a new store and leave there what
 * it made (a secret and the token signed with it, a link, a key) where no server would see it. And
 * migrating a store is the operator's call (svc migrate, or starting the server), not a side effect of
 * printing a token under a server that may still be running the previous version.
 */
async function openServerStore(databaseUrl: string): Promise<Store> {
  const storage = await loadStorage();
  let store: Store;
  try {
    store = storage.openStore(databaseUrl, { existing: true });
  } catch (err) {
    if (!(err instanceof storage.StoreNotFoundError)) throw err;
    const path = databaseUrl.slice('sqlite:'.length);
    const unset = !process.env.SVC_DATABASE_URL?.trim();
    const from = `${unset ? 'SVC_DATABASE_URL is not set: the default ' : 'SVC_DATABASE_URL='}${databaseUrl}`;
    const relative = isAbsolute(path) ? '' : `, relative to the current directory ${process.cwd()}`;
    throw new Error(
      `there is no store at ${err.path} (${from}${relative}): nothing was created; point SVC_DATABASE_URL ` +
        "at the server's store, or run svc migrate (or start the server) to create a new one",
    );
  }
  try {
    const problem = await migrationProblem(store);
    if (problem) {
      const where = store.sqlitePath
        ? `the store at ${store.sqlitePath} (SVC_DATABASE_URL)`
        : `the database at SVC_DATABASE_URL (${storage.describeDatabaseUrl(databaseUrl)})`;
      throw new Error(`${where} ${problem}`);
    }
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}

/** What keeps this version of svc from using `store` as it is, or null. */
async function migrationProblem(store: Store): Promise<string | null> {
  const { migrationState } = await import('./storage/migrate.js');
  const { applied, unknown, pending } = await migrationState(store);
  if (applied.length === 0) {
    return (
      "holds no svc tables: it is not the server's store, or it was never migrated; point " +
      "SVC_DATABASE_URL at the server's store, or run svc migrate to set this one up"
    );
  }
  if (unknown.length > 0) {
    return `was migrated by a newer version of svc (its migration ${unknown[0]} is unknown to this one): run that version of svc`;
  }
  if (pending.length > 0) {
    const names = pending.length > 3 ? `${pending.slice(0, 3).join(', ')}, …` : pending.join(', ');
    return (
      `is not migrated to this version of svc (${pending.length} migration${pending.length > 1 ? 's' : ''} ` +
      `pending: ${names}): run svc migrate, or start the server (it migrates on start), then try again`
    );
  }
  return null;
}

async function token(args: string[]): Promise<void> {
  const { values } = parseCommand(args, { sub: { type: 'string' }, ttl: { type: 'string', default: '1h' } });
  const sub = await subOption(values.sub);
  const ttl = ttlOption(values.ttl ?? '1h', TOKEN_MAX_TTL_SECONDS);
  const config = loadConfig();
  if (!config.jwtSecret && config.jwtJwksUrl) {
    throw new Error('SVC_JWT_JWKS_URL is set: tokens come from your identity provider, not from svc token');
  }
  const { resolveJwtSecret, signUserToken } = await import('./lib/jwt.js');
  // With SVC_JWT_SECRET the store is not needed: the token is signed whether it answers or not.
  if (config.jwtSecret) {
    console.log(await signUserToken(config.jwtSecret, sub, ttl, config));
    return;
  }
  persistentStore(
    config.databaseUrl,
    'a token signed with a secret generated here is accepted by no server (or set SVC_JWT_SECRET)',
  );
  const store = await openServerStore(config.databaseUrl);
  try {
    const secret = await resolveJwtSecret(config, store);
    console.log(await signUserToken(secret!, sub, ttl, config));
  } finally {
    await store.close();
  }
}

async function loginLink(args: string[]): Promise<void> {
  const { values } = parseCommand(args, { sub: { type: 'string' }, ttl: { type: 'string', default: '15m' } });
  const sub = await subOption(values.sub);
  const ttl = ttlOption(values.ttl ?? '15m', LOGIN_LINK_MAX_TTL_SECONDS);
  const config = loadConfig();
  persistentStore(config.databaseUrl, 'a link stored there opens nothing');
  const { createSessionService } = await import('./modules/sessions/service.js');
  const store = await openServerStore(config.databaseUrl);
  try {
    const sessions = createSessionService({
      db: store.db,
      clock: { now: () => new Date() },
      baseUrl: config.baseUrl,
    });
    const link = await sessions.createLoginLink(sub, ttl);
    console.log(link.url);
    console.error(`valid once, until ${link.expiresAt}`);
  } finally {
    await store.close();
  }
}

async function keys(args: string[]): Promise<void> {
  const { positionals } = parseCommand(args, {}, 1);
  const action = positionals[0];
  if (action !== 'list' && action !== 'rotate') {
    throw new UsageError(
      action === undefined
        ? 'a keys command is required: list or rotate'
        : `unknown keys command "${action}"`,
    );
  }
  const config = loadConfig();
  persistentStore(config.databaseUrl, "the signing keys kept there are not the server's");
  const { openSigningKeys, signingKeysOf } = await import('./signing/open.js');
  const { keySetStorageFor } = await import('./signing/storage.js');
  const { systemClock } = await import('./lib/clock.js');
  const store = await openServerStore(config.databaseUrl);
  try {
    if (action === 'rotate') {
      // Not opened first: opening a store without a key would generate one only to retire it at once.
      const r = await signingKeysOf(config, store, systemClock).rotate();
      console.log(`new signing key ${r.kid}`);
      if (!r.previousKid) {
        console.log('the store had no signing key: this is its first, and the only one created');
        return;
      }
      console.log(`previous key ${r.previousKid} stays published until ${r.previousPublishedUntil}`);
      console.log('running instances pick the new key up within 10 seconds');
      return;
    }
    // Listing creates nothing: opening a key set that holds no key yet would generate one (or record
    // the operator's key) on the spot, which is the server's first start's to do.
    const stored = await keySetStorageFor(store).read();
    if (!stored || stored.keys.length === 0) {
      console.error(
        config.signingKeyFile
          ? 'the store holds no signing key yet: the server records the key of SVC_SIGNING_KEY_FILE on its first start'
          : 'the store has no signing key yet: the server creates one on its first start, or run svc keys rotate',
      );
      return;
    }
    const set = await openSigningKeys(config, store, systemClock);
    for (const k of await set.list()) {
      const until = k.publishedUntil ? ` published until ${k.publishedUntil}` : '';
      console.log(
        `${k.kid}  ${k.status}  ${k.source}  created ${k.createdAt}${until}${k.published ? '' : ' (withdrawn)'}`,
      );
    }
  } finally {
    await store.close();
  }
}

const VERIFY_USAGE =
  'usage: svc receipts verify <file|url|-> [--api-key KEY] [--after N] [--checkpoints <file|url> --keys <file|url>]';

interface ReceiptSource {
  lines: AsyncIterable<string>;
  /** Receipts the server announced for this export (X-Chain-Length minus the cursor), if known. */
  expected: number | null;
  /**
   * The whole chain as the server holds it now, from sequence 0: no checkpoint read before it may
   * be longer than the export.
   */
  wholeChain: boolean;
}

/**
 * Why a request failed, as its causes tell: fetch says only "fetch failed" and keeps the reason in
 * `cause` ("connect ECONNREFUSED 127.0.0.1:8080", a certificate error), a connection tried on several
 * addresses in an AggregateError of one error each.
 */
function failureOf(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const own =
      e instanceof AggregateError && e.errors.length > 0
        ? e.errors.map((x) => (x instanceof Error ? x.message : String(x))).join('; ')
        : e.message || ((e as NodeJS.ErrnoException).code ?? '');
    if (own && !parts.some((p) => p.includes(own))) parts.push(own);
  }
  return parts.join(': ') || String(err);
}

/** fetch, with an error that names the URL and why no answer came. */
async function fetchOrSay(url: string | URL, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (err) {
    // "fetch failed" says nothing the sentence does not: its causes say why.
    const why = err instanceof Error && err.cause instanceof Error ? err.cause : err;
    throw new Error(`${url} could not be fetched: ${failureOf(why)}`);
  }
}

/**
 * GET with the API key, if one is given. With a key, redirects are not followed (fetch would send the
 * key on to wherever they point): a redirect is an error naming its target.
 */
async function getWithKey(url: string | URL, apiKey: string | undefined): Promise<Response> {
  if (!apiKey) return fetchOrSay(url);
  const res = await fetchOrSay(url, { headers: { 'x-service-api-key': apiKey }, redirect: 'manual' });
  if (res.status >= 300 && res.status < 400) {
    await res.body?.cancel();
    const to = res.headers.get('location');
    throw new Error(
      `${url} answered HTTP ${res.status}, a redirect${to ? ` to ${to}` : ''}; redirects are not followed with an API key (it would be sent there too): give the address the service answers at`,
    );
  }
  return res;
}

async function fetchExport(target: string, apiKey: string | undefined, after: string | undefined) {
  const url = new URL(target);
  if (after !== undefined) url.searchParams.set('after', after);
  const res = await getWithKey(url, apiKey);
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => '');
    let why = text.slice(0, 300);
    try {
      const e = JSON.parse(text).error;
      why = `${e.code}: ${e.message}`;
    } catch {}
    throw new Error(`${url} answered HTTP ${res.status}${why ? ` (${why})` : ''}`);
  }
  const length = Number(res.headers.get('x-chain-length') ?? Number.NaN);
  const from = Number(url.searchParams.get('after') ?? -1) + 1;
  // With X-Next-After the server cut the export short on purpose: no completeness check then.
  const expected =
    Number.isSafeInteger(length) && Number.isSafeInteger(from) && !res.headers.has('x-next-after')
      ? Math.max(0, length - from)
      : null;
  return {
    lines: linesOf(res.body as ReadableStream<Uint8Array>),
    expected,
    wholeChain: from === 0 && !url.searchParams.has('limit') && !res.headers.has('x-next-after'),
  };
}

const isUrl = (target: string) => /^https?:\/\//i.test(target);

function openSource(
  target: string,
  apiKey: string | undefined,
  after: string | undefined,
): Promise<ReceiptSource> | ReceiptSource {
  if (isUrl(target)) return fetchExport(target, apiKey, after);
  if (after !== undefined) throw new Error('--after applies to a URL only; a file is verified whole');
  const input = target === '-' ? process.stdin : createReadStream(target);
  return { lines: linesOf(input), expected: null, wholeChain: false };
}

/** A JSON document from a file or a URL (sent with `apiKey` when one is given). */
async function readJson(target: string, apiKey: string | undefined): Promise<unknown> {
  if (!isUrl(target)) return JSON.parse(await readFile(target, 'utf8'));
  const res = await getWithKey(target, apiKey);
  if (!res.ok) throw new Error(`${target} answered HTTP ${res.status}`);
  return res.json();
}

/** Page size when reading GET /v1/receipts/checkpoints (its maximum), unless the URL sets `limit`. */
const CHECKPOINT_PAGE = 100;

/**
 * A checkpoint URL's document. The service's list (`…/v1/receipts/checkpoints`) is followed page by
 * page (`before` = the smallest tree size seen) to its end, so every checkpoint is checked; any other
 * URL is read once, as it is.
 */
async function fetchCheckpoints(target: string, apiKey: string | undefined): Promise<unknown> {
  const url = new URL(target);
  if (!url.pathname.endsWith('/v1/receipts/checkpoints')) return readJson(target, apiKey);
  if (!url.searchParams.has('limit')) url.searchParams.set('limit', String(CHECKPOINT_PAGE));
  const limit = Number(url.searchParams.get('limit'));
  const all: unknown[] = [];
  for (;;) {
    const doc = await readJson(url.toString(), apiKey);
    const page = (doc as { data?: unknown } | null)?.data;
    if (!Array.isArray(page)) return all.length === 0 ? doc : { data: all };
    all.push(...page);
    const sizes = page.map((c) => (c as Checkpoint | null)?.tree_size);
    const smallest = Math.min(...sizes.map((n) => (typeof n === 'number' ? n : Number.NaN)));
    const before = Number(url.searchParams.get('before') ?? Number.POSITIVE_INFINITY);
    // A short page is the last; a page that does not move below the cursor would repeat forever.
    if (page.length < limit || !(smallest > 1 && smallest < before)) return { data: all };
    url.searchParams.set('before', String(smallest));
  }
}

/** Checkpoints as saved or served: {data: [...]}, an array, one checkpoint, or NDJSON. */
async function readCheckpoints(target: string, apiKey: string | undefined): Promise<Checkpoint[]> {
  let doc: unknown;
  try {
    doc = isUrl(target) ? await fetchCheckpoints(target, apiKey) : await readJson(target, undefined);
  } catch (err) {
    if (isUrl(target) || !(err instanceof SyntaxError)) throw err;
    doc = (await readFile(target, 'utf8'))
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => JSON.parse(l));
  }
  const list = Array.isArray(doc)
    ? doc
    : Array.isArray((doc as { data?: unknown })?.data)
      ? (doc as { data: unknown[] }).data
      : [doc];
  return list as Checkpoint[];
}

const VERIFY_OPTIONS = {
  'api-key': { type: 'string' },
  after: { type: 'string' },
  checkpoints: { type: 'string' },
  keys: { type: 'string' },
} as const;

function verifyArgs(args: string[]) {
  let parsed: {
    values: { 'api-key'?: string; after?: string; checkpoints?: string; keys?: string };
    positionals: string[];
  };
  try {
    const { values, positionals, tokens } = parseArgs({
      args,
      allowPositionals: true,
      options: VERIFY_OPTIONS,
      tokens: true,
    });
    const repeated = repeatedOption(tokens, VERIFY_OPTIONS);
    if (repeated) throw new Error(givenTwice(repeated));
    parsed = { values, positionals };
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${VERIFY_USAGE}`);
  }
  if (parsed.positionals.length !== 1) throw new Error(VERIFY_USAGE);
  const after = parsed.values.after;
  if (after !== undefined && !/^\d+$/.test(after)) {
    throw new Error('--after must be a sequence number (a non-negative integer)');
  }
  if ((parsed.values.checkpoints === undefined) !== (parsed.values.keys === undefined)) {
    throw new Error(
      '--checkpoints and --keys go together: a checkpoint is only as good as the key set it is checked against',
    );
  }
  return { target: parsed.positionals[0]!, values: parsed.values };
}

/** Exit code 0: the chain is intact; 1: it is broken; 2: usage or I/O error. */
async function receipts(args: string[]): Promise<void> {
  try {
    if (args[0] !== 'verify') throw new Error(VERIFY_USAGE);
    const { target, values } = verifyArgs(args.slice(1));
    const apiKey = values['api-key'] ?? (process.env.SVC_API_KEY || undefined);
    // The key goes to the service only: the export's origin when it is a URL. The published key set
    // needs none, and may be kept elsewhere by whoever distrusts the service.
    const serviceOrigin = isUrl(target) ? new URL(target).origin : null;
    const keyFor = (url: string) =>
      isUrl(url) && (serviceOrigin === null || new URL(url).origin === serviceOrigin) ? apiKey : undefined;
    const checkpoints = values.checkpoints
      ? await readCheckpoints(values.checkpoints, keyFor(values.checkpoints))
      : [];
    const keySet = values.keys
      ? ((await readJson(values.keys, undefined)) as { keys?: PublicJwk[] })?.keys
      : [];
    if (!Array.isArray(keySet)) throw new Error(`${values.keys} is not a key set ({"keys": [...]})`);
    const source = await openSource(target, apiKey, values.after);
    const report = await verifyReceiptChain(source.lines, {
      treeSizes: checkpoints.map((c) => c?.tree_size),
    });
    let output = formatReport(report);
    let ok = report.ok;
    if (values.checkpoints) {
      const results = await checkCheckpoints(checkpoints, keySet, report);
      ok &&= results.every((r) => r.status !== 'failed');
      output += `\n${formatCheckpointResults(results)}`;
      // The checkpoints were read before the export: a whole-chain export shorter than one of them
      // (validly signed; of this organization when the export has a receipt) lost receipts at its end,
      // whatever length it announced.
      const longer = source.wholeChain
        ? results.filter((r) => r.code === 'not_covered' && r.tree_size > report.count)
        : [];
      if (longer.length > 0) {
        ok = false;
        const size = Math.max(...longer.map((r) => r.tree_size));
        output =
          `FAILED: the export ended after ${report.count} receipt(s) but a signed checkpoint covers ` +
          `${size}: receipts are missing at the end\n${output}`;
      }
    }
    if (source.expected !== null && report.count < source.expected) {
      // A clean end before the announced length: receipts are missing from the end of the chain.
      ok = false;
      output =
        `FAILED: the export ended after ${report.count} receipt(s) but the server announced ` +
        `${source.expected} (X-Chain-Length): receipts are missing at the end\n${output}`;
    }
    console.log(output);
    process.exitCode = ok ? 0 : 1;
  } catch (err) {
    // With its causes: an export cut off while it is read fails with "terminated" alone.
    console.error(`svc: ${failureOf(err)}`);
    process.exitCode = 2;
  }
}

/** What `svc <command> --help` (or `-h`) prints: the command's usage line and what it does. */
const COMMAND_USAGE: Record<string, string> = {
  serve:
    'usage: svc serve\n\nRun the HTTP service (migrates the store first). Configuration comes from the environment (see README.md).',
  migrate: 'usage: svc migrate\n\nApply pending migrations and exit.',
  token: "usage: svc token --sub USER [--ttl 1h]\n\nPrint a user JWT signed with the server's HS256 secret.",
  'login-link':
    'usage: svc login-link --sub USER [--ttl 15m]\n\nPrint a one-time dashboard sign-in link under SVC_BASE_URL.',
  receipts: `${VERIFY_USAGE}

Verify an NDJSON receipt export offline (a file, stdin, or a GET /v1/receipts/export URL; the key
defaults to SVC_API_KEY); with checkpoints (saved JSON or GET /v1/receipts/checkpoints) and a key set
(saved JWKS or /.well-known/svc-keys.json), also their signatures and that the export matches each
of them. Exit 0 intact, 1 broken, 2 usage or I/O error.`,
  keys: `usage: svc keys list|rotate

list    list the signing keys (active, retired, published until)
rotate  generate a new signing key; the previous one stays published for SVC_SIGNING_KEY_OVERLAP
        (default 30d); on a store without a key, create its first one`,
  help: 'usage: svc help [command]\n\nShow the usage of every command, or of one (also svc <command> --help).',
};

/** `--help` or `-h` among a command's arguments (before a `--`, after which all are positionals). */
function asksForHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === '--') return false;
    if (a === '--help' || a === '-h') return true;
  }
  return false;
}

export async function main(argv: string[]): Promise<void> {
  const [given, ...rest] = argv;
  // `svc --help` and `svc -h` are `svc help`.
  const command = given === '--help' || given === '-h' ? 'help' : given;
  if (command !== undefined && Object.hasOwn(COMMAND_USAGE, command) && asksForHelp(rest)) {
    console.log(COMMAND_USAGE[command]);
    return;
  }
  try {
    await run(command, rest);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    // A mistake after help (an unknown command to show) is answered with svc's own usage line.
    const usage =
      command !== undefined && command !== 'help' && Object.hasOwn(COMMAND_USAGE, command)
        ? COMMAND_USAGE[command]!
        : USAGE;
    console.error(`svc: ${err.message}\n${usage.split('\n\n')[0]}`);
    process.exitCode = 2;
  }
}

function run(command: string | undefined, rest: string[]): Promise<void> | undefined {
  switch (command) {
    case 'serve':
      return serve(rest);
    case 'migrate':
      return migrate(rest);
    case 'token':
      return token(rest);
    case 'login-link':
      return loginLink(rest);
    case 'receipts':
      return receipts(rest);
    case 'keys':
      return keys(rest);
    case undefined:
    case 'help': {
      const { positionals } = parseCommand(rest, {}, 1);
      const topic = positionals[0];
      if (topic === undefined) console.log(USAGE);
      else if (Object.hasOwn(COMMAND_USAGE, topic)) console.log(COMMAND_USAGE[topic]);
      else throw new UsageError(`unknown command "${topic}"`);
      return;
    }
    default:
      console.error(`svc: unknown command "${command}"\n\n${USAGE}`);
      process.exitCode = 2;
  }
}
