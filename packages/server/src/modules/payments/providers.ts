import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { ExpressionBuilder, Kysely } from 'kysely';
import type { Clock } from '../../lib/clock.js';
import { uuidv7 } from '../../lib/ids.js';
import type { OrgScope } from '../../lib/scope.js';
import { storableText } from '../../lib/storable.js';
import type { Db } from '../../storage/db.js';
import type { RawRequest } from '../mcp/http-fetch.js';
import { ALLOW_PRIVATE_HINT, upstreamHostRefusal } from '../mcp/ssrf.js';
import {
  type FlowTables,
  flowError,
  type PaymentRow,
  type PaymentState,
  type ProviderAnswer,
  type ProviderRow,
} from './flow-model.js';
import { type GatewayError, gatewayError } from './model.js';

type F = Kysely<FlowTables>;
const view = (db: Db): F => db.withTables<FlowTables>() as unknown as F;

/** The rail that settles on the service's own spend ledger; no provider may claim it. */
export const LEDGER_RAIL = 'ledger';

/** The largest provider answer read; the rest is discarded. */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * Credentials are sealed with AES-256-GCM under the operator's key (SVC_PROVIDER_CREDENTIALS_KEY),
 * bound to their organization and connection (additional data), so a sealed value copied to
 * another row or tenant does not open.
 */
export function sealCredentials(key: Buffer, aad: string, plain: Record<string, string>): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad));
  const ct = Buffer.concat([cipher.update(JSON.stringify(plain), 'utf8'), cipher.final()]);
  return ['v1', iv, cipher.getAuthTag(), ct]
    .map((p) => (typeof p === 'string' ? p : p.toString('base64url')))
    .join('.');
}

export function openCredentials(key: Buffer, aad: string, sealed: string): Record<string, string> {
  const [v, iv, tag, ct] = sealed.split('.');
  if (v !== 'v1' || !iv || !tag || ct === undefined)
    throw new Error('sealed credentials have an unknown format');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
  decipher.setAAD(Buffer.from(aad));
  decipher.setAuthTag(Buffer.from(tag, 'base64url'));
  const plain = Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]);
  return JSON.parse(plain.toString('utf8'));
}

const aadOf = (row: Pick<ProviderRow, 'organization_id' | 'id'>) => `${row.organization_id}/${row.id}`;

/**
 * What a write of a connection requires of the row as it stands: each member given must still hold.
 * Members left out are not compared.
 */
export interface ProviderWriteGuard {
  /** The row still has this url. */
  url?: string;
  /** The row still has these sealed credentials (null: none). */
  credentials?: string | null;
  /** The row's credentials still set these header names (`credential_names`). */
  credential_names?: string;
  /**
   * No payment handed to the connection is pending or of unknown outcome: its retry must reach the
   * same endpoint the same way (the check `remove` makes, in the same statement).
   */
  settled?: boolean;
}

/** A payment the connection was handed is pending or of unknown outcome (a condition on `gateway_providers`). */
const unresolvedPayment =
  (org: string, id: string) =>
  ({ exists, selectFrom }: ExpressionBuilder<FlowTables, 'gateway_providers'>) =>
    exists(
      selectFrom('gateway_payments')
        .select('capsule_id')
        .where('gateway_payments.organization_id', '=', org)
        .where('gateway_payments.provider_id', '=', id)
        .where('gateway_payments.state', 'in', ['pending', 'unknown'] satisfies PaymentState[]),
    );

/** No payment the connection was handed is pending or of unknown outcome. */
const noUnresolvedPayment =
  (org: string, id: string) => (eb: ExpressionBuilder<FlowTables, 'gateway_providers'>) =>
    eb.not(unresolvedPayment(org, id)(eb));

export function createProviderRepository(base: Db) {
  const db = view(base);
  return {
    async insert(row: ProviderRow): Promise<boolean> {
      const r = await db
        .insertInto('gateway_providers')
        .values(row)
        .onConflict((oc) => oc.columns(['organization_id', 'rail']).doNothing())
        .executeTakeFirst();
      return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
    },
    async get(org: string, id: string) {
      return db
        .selectFrom('gateway_providers')
        .selectAll()
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .executeTakeFirst();
    },
    async byRail(org: string, rail: string) {
      return db
        .selectFrom('gateway_providers')
        .selectAll()
        .where('organization_id', '=', org)
        .where('rail', '=', rail)
        .executeTakeFirst();
    },
    async list(org: string) {
      return db
        .selectFrom('gateway_providers')
        .selectAll()
        .where('organization_id', '=', org)
        .orderBy('created_at')
        .orderBy('id')
        .execute();
    },
    /**
     * Writes `set`, only while the row still matches `guard` (false when it did not: another change
     * came first, or a payment handed to the connection is unresolved).
     */
    async update(
      org: string,
      id: string,
      set: Partial<ProviderRow>,
      guard: ProviderWriteGuard = {},
    ): Promise<boolean> {
      let q = db
        .updateTable('gateway_providers')
        .set(set)
        .where('organization_id', '=', org)
        .where('id', '=', id);
      if (guard.url !== undefined) q = q.where('url', '=', guard.url);
      if (guard.credentials !== undefined) {
        const { credentials } = guard;
        q = q.where((eb) =>
          credentials === null ? eb('credentials', 'is', null) : eb('credentials', '=', credentials),
        );
      }
      if (guard.credential_names !== undefined) q = q.where('credential_names', '=', guard.credential_names);
      if (guard.settled) q = q.where(noUnresolvedPayment(org, id));
      const r = await q.executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },
    /** Removes a connection unless a payment it was handed is pending or of unknown outcome. */
    async remove(org: string, id: string): Promise<boolean> {
      const r = await db
        .deleteFrom('gateway_providers')
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .where(noUnresolvedPayment(org, id))
        .executeTakeFirst();
      return Number(r.numDeletedRows) === 1;
    },
    /** Whether a payment handed to the connection is pending or of unknown outcome. */
    async unresolved(org: string, id: string): Promise<boolean> {
      const row = await db
        .selectFrom('gateway_providers')
        .select('id')
        .where('organization_id', '=', org)
        .where('id', '=', id)
        .where(unresolvedPayment(org, id))
        .executeTakeFirst();
      return row !== undefined;
    },
  };
}

export function createPaymentRepository(base: Db) {
  const db = view(base);
  return {
    async get(org: string, capsuleId: string) {
      return db
        .selectFrom('gateway_payments')
        .selectAll()
        .where('organization_id', '=', org)
        .where('capsule_id', '=', capsuleId)
        .executeTakeFirst();
    },
    async insert(row: PaymentRow): Promise<void> {
      await db.insertInto('gateway_payments').values(row).execute();
    },
    /** Moves the payment from `from` (compare-and-set on state and attempt count). */
    async move(org: string, row: PaymentRow, set: Partial<PaymentRow>): Promise<boolean> {
      const r = await db
        .updateTable('gateway_payments')
        .set(set)
        .where('organization_id', '=', org)
        .where('capsule_id', '=', row.capsule_id)
        .where('state', '=', row.state)
        .where('attempts', '=', row.attempts)
        .executeTakeFirst();
      return Number(r.numUpdatedRows) === 1;
    },
    /** Removes the payment row `row` (compare-and-set as `move`); false when it was no longer so. */
    async remove(org: string, row: PaymentRow): Promise<boolean> {
      const r = await db
        .deleteFrom('gateway_payments')
        .where('organization_id', '=', org)
        .where('capsule_id', '=', row.capsule_id)
        .where('state', '=', row.state)
        .where('attempts', '=', row.attempts)
        .executeTakeFirst();
      return Number(r.numDeletedRows) === 1;
    },
    /** Micro-dollars of the entity's payments in flight or of unknown outcome (they may have been paid). */
    async openAmount(org: string, entityId: string, exceptCapsule: string): Promise<number> {
      const rows = await db
        .selectFrom('gateway_payments')
        .select(['amount_micros'])
        .where('organization_id', '=', org)
        .where('entity_id', '=', entityId)
        .where('state', 'in', ['pending', 'unknown'] satisfies PaymentState[])
        .where('capsule_id', '!=', exceptCapsule)
        .execute();
      return rows.reduce((s, r) => s + Number(r.amount_micros), 0);
    },
  };
}

export type PaymentRepository = ReturnType<typeof createPaymentRepository>;

export function providerAnswer(row: ProviderRow): ProviderAnswer {
  return {
    id: row.id,
    name: row.name,
    rail: row.rail,
    url: row.url,
    timeout_ms: Number(row.timeout_ms),
    enabled: Number(row.enabled) === 1,
    credentials: { configured: row.credentials !== null, names: JSON.parse(row.credential_names) },
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

export interface ProviderInput {
  name: string;
  rail: string;
  url: string;
  /** Header name → value sent with every payment (e.g. authorization); write-only. */
  credentials?: Record<string, string> | null;
  timeout_ms?: number;
  enabled?: boolean;
}

type Caller = Pick<OrgScope, 'organizationId' | 'principal'>;

export interface ProviderServiceDeps {
  store: Db;
  clock: Clock;
  /** SVC_PROVIDER_CREDENTIALS_KEY, 32 bytes; null: connections cannot hold credentials. */
  credentialsKey: Buffer | null;
  allowPrivate: boolean;
  /**
   * Runs `fn` holding the organization's spend-ledger lock, in its transaction: the lock a consume
   * holds from reading the rail's connection to recording its payment as pending, so a change of
   * the connection never lands in between.
   */
  locked<T>(org: string, fn: (db: Db) => Promise<T>): Promise<T>;
}

export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

/** Payment provider connections: which endpoint executes the payments of a rail, per organization. */
export function createProviderService(deps: ProviderServiceDeps) {
  const repo = createProviderRepository(deps.store);
  const now = () => deps.clock.now().toISOString();

  const person = (scope: Caller, what: string) => {
    if (scope.principal.kind !== 'user') {
      throw gatewayError.forbidden(`${what} takes a person (user token), not an API key`);
    }
  };

  async function checkUrl(raw: string): Promise<string> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw gatewayError.invalidRequest(`url "${raw}" is not a valid URL`, 'url');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw gatewayError.invalidRequest('url must use http or https', 'url');
    }
    if (url.username || url.password) {
      throw gatewayError.invalidRequest('url must not contain credentials; send them as credentials', 'url');
    }
    const refusal = await upstreamHostRefusal(url, { allowPrivate: deps.allowPrivate });
    if (refusal) throw gatewayError.invalidRequest(`url refused: ${refusal} (${ALLOW_PRIVATE_HINT})`, 'url');
    return url.toString();
  }

  function seal(row: Pick<ProviderRow, 'organization_id' | 'id'>, credentials: Record<string, string>) {
    if (!deps.credentialsKey) {
      throw flowError.credentialsKeyMissing(
        'provider credentials cannot be stored: the operator has not set SVC_PROVIDER_CREDENTIALS_KEY',
        'credentials',
      );
    }
    return sealCredentials(deps.credentialsKey, aadOf(row), credentials);
  }

  const credentialNames = (c: Record<string, string>) =>
    JSON.stringify(
      Object.keys(c)
        .map((k) => k.toLowerCase())
        .sort(),
    );

  async function find(org: string, id: string): Promise<ProviderRow> {
    const row = await repo.get(org, id);
    if (!row) throw flowError.providerNotFound(`provider ${id} not found`, 'id');
    return row;
  }

  const railTaken = (rail: string) =>
    rail === LEDGER_RAIL
      ? gatewayError.invalidRequest('the ledger rail is built in and settles on the spend ledger', 'rail')
      : flowError.providerRailTaken(`rail ${rail} is already routed to another provider`, 'rail');

  return {
    async create(scope: Caller, input: ProviderInput): Promise<ProviderAnswer> {
      person(scope, 'configuring a payment provider');
      if (input.rail === LEDGER_RAIL) throw railTaken(input.rail);
      const at = now();
      const base = { organization_id: scope.organizationId, id: uuidv7() };
      const row: ProviderRow = {
        ...base,
        name: input.name,
        rail: input.rail,
        url: await checkUrl(input.url),
        credentials: input.credentials ? seal(base, input.credentials) : null,
        credential_names: credentialNames(input.credentials ?? {}),
        timeout_ms: input.timeout_ms ?? DEFAULT_PROVIDER_TIMEOUT_MS,
        enabled: input.enabled === false ? 0 : 1,
        created_at: at,
        updated_at: at,
      };
      if (!(await repo.insert(row))) throw railTaken(input.rail);
      return providerAnswer(row);
    },

    async list(scope: Caller): Promise<ProviderAnswer[]> {
      return (await repo.list(scope.organizationId)).map(providerAnswer);
    },

    async get(scope: Caller, id: string): Promise<ProviderAnswer> {
      return providerAnswer(await find(scope.organizationId, id));
    },

    /**
     * Changes a connection. While a payment handed to it is pending or of unknown outcome, what
     * decides where and how that payment's retry is sent (the url, the credentials' header names)
     * cannot change (409 payment_unresolved): the retry repeats the payment's Idempotency-Key, and an
     * endpoint that never saw the key would pay again. Name, rail, timeout, enabled and credential
     * values under the same header names (a rotated secret) may change.
     */
    async update(scope: Caller, id: string, input: Partial<ProviderInput>): Promise<ProviderAnswer> {
      person(scope, 'configuring a payment provider');
      const org = scope.organizationId;
      const row = await find(org, id);
      const set: Partial<ProviderRow> = { updated_at: now() };
      if (input.name !== undefined) set.name = input.name;
      if (input.url !== undefined) set.url = await checkUrl(input.url);
      // Stored credentials never follow the address to another origin: whoever moves it re-supplies them.
      if (
        set.url !== undefined &&
        input.credentials === undefined &&
        row.credentials !== null &&
        new URL(set.url).origin !== new URL(row.url).origin
      ) {
        throw gatewayError.invalidRequest(
          'credentials must be sent again (or null) when the url moves to another origin',
          'credentials',
        );
      }
      if (input.timeout_ms !== undefined) set.timeout_ms = input.timeout_ms;
      if (input.enabled !== undefined) set.enabled = input.enabled ? 1 : 0;
      if (input.credentials !== undefined) {
        set.credentials = input.credentials ? seal(row, input.credentials) : null;
        set.credential_names = credentialNames(input.credentials ?? {});
      }
      if (input.rail !== undefined && input.rail !== row.rail) {
        if (input.rail === LEDGER_RAIL) throw railTaken(input.rail);
        const other = await repo.byRail(org, input.rail);
        if (other) throw railTaken(input.rail);
        set.rail = input.rail;
      }
      // A url that moves while the stored credentials stay is written only over the state checked
      // above: credentials stored meanwhile (by someone else) must not follow it either.
      const moving = set.url !== undefined && input.credentials === undefined;
      // Where and how a retry is sent: a change of either waits until no payment is unresolved. The
      // row is compared with what was read, so a value changed meanwhile is never written back unguarded.
      const repointing = set.url !== undefined && set.url !== row.url;
      const renaming = set.credential_names !== undefined && set.credential_names !== row.credential_names;
      const guard: ProviderWriteGuard = {};
      if (set.url !== undefined) guard.url = row.url;
      if (moving) guard.credentials = row.credentials;
      if (set.credential_names !== undefined) guard.credential_names = row.credential_names;
      if (repointing || renaming) guard.settled = true;
      let written: boolean;
      try {
        // Under the spend-ledger lock: a consume that read the connection records its payment first.
        written = await deps.locked(org, (db) => createProviderRepository(db).update(org, id, set, guard));
      } catch (err) {
        // Two updates raced to the same rail: the unique constraint refused the second.
        if (set.rail !== undefined && (await repo.byRail(org, set.rail))) throw railTaken(set.rail);
        throw err;
      }
      if (!written) {
        // Deleted since it was read: answered as one that never existed.
        await find(org, id);
        if (guard.settled && (await repo.unresolved(org, id))) {
          throw flowError.paymentUnresolved(
            `provider ${id} was handed a payment that is pending or of unknown outcome; its ${repointing ? 'url' : 'credential header names'} cannot change until that payment is resolved, since its retry must reach the same endpoint with the same Idempotency-Key`,
            repointing ? 'url' : 'credentials',
          );
        }
        if (moving) {
          throw gatewayError.invalidRequest(
            'the connection changed while the url was being moved; read it and send the change again (with credentials when the origin changes)',
            'credentials',
          );
        }
        throw gatewayError.invalidRequest(
          'the connection changed while this change was made; read it and send the change again',
          set.url !== undefined ? 'url' : 'credentials',
        );
      }
      // Read back; it may have been deleted since the write as well.
      return providerAnswer(await find(org, id));
    },

    async remove(scope: Caller, id: string): Promise<void> {
      person(scope, 'configuring a payment provider');
      const org = scope.organizationId;
      // Under the spend-ledger lock, as `update`: never between a consume's read of it and its payment.
      if (!(await deps.locked(org, (db) => createProviderRepository(db).remove(org, id)))) {
        await find(org, id);
        throw flowError.paymentUnresolved(
          `provider ${id} was handed a payment that is pending or of unknown outcome; it is needed to ask for that payment's outcome`,
          'id',
        );
      }
    },
  };
}

export type ProviderService = ReturnType<typeof createProviderService>;

/** What a provider answered to one payment request. */
export type SendOutcome =
  | { kind: 'succeeded'; reference: string }
  /** The provider refused for certain (a 4xx other than 408, 409 and 429): nothing was paid. */
  | { kind: 'refused'; error: GatewayError }
  /**
   * Nothing was sent (the address guard refused the provider's address, or its credentials could
   * not be opened): this attempt reached no provider, so it says nothing about earlier ones.
   */
  | { kind: 'not_sent'; error: GatewayError }
  /** No answer, a 5xx, a 429 or a 2xx without a reference: it may or may not have been paid. */
  | { kind: 'unknown'; error: GatewayError };

export interface ProviderClientDeps {
  request: RawRequest;
  credentialsKey: Buffer | null;
  allowPrivate: boolean;
}

async function readCapped(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res) {
    const b = chunk as Buffer;
    if (size < MAX_ANSWER_BYTES) chunks.push(b.subarray(0, MAX_ANSWER_BYTES - size));
    size += b.length;
  }
  return Buffer.concat(chunks).toString('utf8');
}

const excerpt = (body: string) => {
  const s = body.replace(/\s+/g, ' ').trim();
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
};

/**
 * Posts one payment to a provider: `POST url` with the JSON request, `Idempotency-Key` and the
 * connection's credentials as headers, within its timeout. The answer is classified so that the
 * caller knows whether anything may have been paid; the address guard applies as to MCP upstreams.
 */
export async function sendPayment(
  deps: ProviderClientDeps,
  provider: ProviderRow,
  idempotencyKey: string,
  body: string,
): Promise<SendOutcome> {
  const url = new URL(provider.url);
  const refusal = await upstreamHostRefusal(url, {
    allowPrivate: deps.allowPrivate,
    requireResolution: true,
  });
  if (refusal) {
    // Nothing was sent: this attempt paid nothing (an earlier one with the same key still may have).
    return {
      kind: 'not_sent',
      error: flowError.providerUpstream(`provider address refused (nothing was sent): ${refusal}`),
    };
  }
  let credentials: Record<string, string> = {};
  if (provider.credentials !== null) {
    if (!deps.credentialsKey) {
      return {
        kind: 'not_sent',
        error: flowError.credentialsKeyMissing(
          'the provider credentials cannot be opened: SVC_PROVIDER_CREDENTIALS_KEY is not set',
        ),
      };
    }
    try {
      credentials = openCredentials(deps.credentialsKey, aadOf(provider), provider.credentials);
    } catch {
      // Nothing was sent: a key that changed since the credentials were stored opens nothing.
      return {
        kind: 'not_sent',
        error: flowError.credentialsKeyMissing(
          `the credentials of provider ${provider.name} do not open with the configured SVC_PROVIDER_CREDENTIALS_KEY; set them again`,
        ),
      };
    }
  }
  const signal = AbortSignal.timeout(Number(provider.timeout_ms));
  let res: IncomingMessage;
  let answer: string;
  try {
    res = await deps.request(url, {
      method: 'POST',
      headers: {
        ...credentials,
        'content-type': 'application/json',
        accept: 'application/json',
        'idempotency-key': idempotencyKey,
      },
      body,
      signal,
    });
    answer = await readCapped(res);
  } catch (err) {
    if (signal.aborted) {
      return {
        kind: 'unknown',
        error: flowError.providerTimeout(
          `provider ${provider.name} did not answer within ${provider.timeout_ms} ms`,
        ),
      };
    }
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    return {
      kind: 'unknown',
      error: flowError.providerUpstream(`provider ${provider.name} could not be reached (${code})`),
    };
  }
  const status = res.statusCode ?? 0;
  if (status === 429) {
    const retry = res.headers['retry-after'];
    const retryAfter = typeof retry === 'string' && /^[\x20-\x7e]{1,64}$/.test(retry) ? retry : null;
    return {
      kind: 'unknown',
      error: flowError.providerRateLimited(
        `provider ${provider.name} answered HTTP 429 (rate limited)`,
        retryAfter,
      ),
    };
  }
  if (status < 200 || status > 299) {
    const error = flowError.providerUpstream(
      `provider ${provider.name} answered HTTP ${status}${answer ? `: ${excerpt(answer)}` : ''}`,
    );
    const certain = status >= 400 && status < 500 && status !== 408 && status !== 409;
    return certain ? { kind: 'refused', error } : { kind: 'unknown', error };
  }
  let reference: unknown;
  try {
    reference = (JSON.parse(answer) as { reference?: unknown }).reference;
  } catch {
    reference = undefined;
  }
  // At most 200 characters, counted in code points as every length of the API (not UTF-16 units).
  if (typeof reference !== 'string' || reference === '' || [...reference].length > 200) {
    return {
      kind: 'unknown',
      error: flowError.providerUpstream(
        `provider ${provider.name} answered HTTP ${status} without a reference (a JSON object with a string member "reference")`,
      ),
    };
  }
  // Paid either way: a reference the stores cannot hold as sent is kept escaped, never refused.
  return { kind: 'succeeded', reference: storableText(reference) };
}
