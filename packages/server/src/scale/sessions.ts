import { createHash } from 'node:crypto';
import {
  evaluateSession,
  type FailedConstraint,
  type SessionConstraints,
  type SessionState,
  sessionIncrements,
} from '@svc/policy-engine';
import type { Redis } from 'ioredis';
import {
  counted,
  loadSessionState,
  type Reservation,
  type SessionCounters,
} from '../enforcement/session-counters.js';
import { AppError } from '../lib/errors.js';
import type { Store } from '../storage/db.js';
import type { Logger } from './redis.js';

/**
 * Check-and-count in one script, so two instances can never both take the last slot. The limit
 * arithmetic mirrors policy-engine's session.ts exactly: call n+1 fails when n+1 > maxCalls; a
 * cumulative total fails when total - max > 1e-9 * |max|. Totals are stored with 17
 * significant digits, which round-trips a double exactly, so a sum here equals the sum in JavaScript.
 *
 * ARGV: 1 ttl ms, 2 '1' = refuse without checking (an argument is invalid whatever the state),
 * 3 maxCalls or '', 4 n, then n triples (argument, maxValue, increment or ''), then the initial state
 * from the store: '1'/'0', calls, m, then m pairs (argument, total).
 * Returns {'init'} when the counter is not in Redis and no initial state was given, else
 * {allowed 0/1, field, value, ...} with the state BEFORE this call.
 */
const RESERVE_SCRIPT = `
local key = KEYS[1]
local n = tonumber(ARGV[4])
if redis.call('EXISTS', key) == 0 then
  local base = 5 + 3 * n
  if ARGV[base] ~= '1' then return {'init'} end
  redis.call('HSET', key, 'calls', ARGV[base + 1])
  for i = 1, tonumber(ARGV[base + 2]) do
    redis.call('HSET', key, 'c:' .. ARGV[base + 1 + 2 * i], ARGV[base + 2 + 2 * i])
  end
end
redis.call('PEXPIRE', key, ARGV[1])
local before = redis.call('HGETALL', key)
local ok = ARGV[2] ~= '1'
local calls = tonumber(redis.call('HGET', key, 'calls') or '0')
if ok and ARGV[3] ~= '' and calls + 1 > tonumber(ARGV[3]) then ok = false end
local totals = {}
for i = 0, n - 1 do
  local inc = ARGV[7 + 3 * i]
  if inc ~= '' then
    local name = ARGV[5 + 3 * i]
    local max = tonumber(ARGV[6 + 3 * i])
    local total = tonumber(redis.call('HGET', key, 'c:' .. name) or '0') + tonumber(inc)
    if total - max > 1e-9 * math.abs(max) then ok = false end
    totals[name] = total
  end
end
if not ok then return {0, unpack(before)} end
redis.call('HINCRBY', key, 'calls', 1)
for name, total in pairs(totals) do
  redis.call('HSET', key, 'c:' .. name, string.format('%.17g', total))
end
return {1, unpack(before)}`;

/** Gives back one counted call: the exact inverse of the increment above. */
const RELEASE_SCRIPT = `
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HINCRBY', key, 'calls', -1)
for i = 1, #ARGV, 2 do
  local field = 'c:' .. ARGV[i]
  local v = tonumber(redis.call('HGET', key, field) or '0') - tonumber(ARGV[i + 1])
  redis.call('HSET', key, field, string.format('%.17g', v))
end
return 1`;

type ScriptReply = Array<string | number>;
type Scripts = {
  svcSessionReserve(key: string, ...args: string[]): Promise<ScriptReply>;
  svcSessionRelease(key: string, ...args: string[]): Promise<number>;
};

/** A session idle this long is dropped from Redis; its next call reloads the stored totals. */
const DEFAULT_TTL_MS = 24 * 3600_000;
const noop = () => {};

function stateOf(reply: ScriptReply): SessionState {
  const state: SessionState = { calls: 0, cumulative: {} };
  for (let i = 1; i + 1 < reply.length; i += 2) {
    const field = String(reply[i]);
    const value = Number(reply[i + 1]);
    if (field === 'calls') state.calls = value;
    else if (field.startsWith('c:')) state.cumulative[field.slice(2)] = value;
  }
  return state;
}

/**
 * Session counters shared by every instance through Redis. A counter not yet in Redis starts from
 * the store's `session_counters` row (loaded once, set only if still absent); the decision writer
 * keeps persisting the absolute values after each call. A key Redis loses (a restart without
 * persistence, an eviction) restarts from that row, which holds only committed calls: the calls in
 * flight at that moment are not counted again (see evictionWarning).
 */
export class RedisSessionCounters implements SessionCounters {
  private readonly scripts: Scripts;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly store: Store,
    private readonly log: Logger,
    private readonly ttlMs = DEFAULT_TTL_MS,
  ) {
    redis.defineCommand('svcSessionReserve', { numberOfKeys: 1, lua: RESERVE_SCRIPT });
    redis.defineCommand('svcSessionRelease', { numberOfKeys: 1, lua: RELEASE_SCRIPT });
    this.scripts = redis as unknown as Scripts;
  }

  private key(org: string, session: string, tool: string): string {
    // Hashed: session ids are caller-chosen strings of any length and content.
    const id = createHash('sha256')
      .update(JSON.stringify([session, tool]))
      .digest('base64url');
    return `${this.prefix}sess:${org}:${id}`;
  }

  private async stored(org: string, session: string, tool: string): Promise<string[]> {
    const state = await loadSessionState(this.store, org, session, tool);
    const cumulative = Object.entries(state.cumulative);
    return ['1', String(state.calls), String(cumulative.length), ...cumulative.flat().map(String)];
  }

  /** The session as Redis holds it (or as stored, when Redis has it not yet); counts nothing. */
  async check(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<FailedConstraint[]> {
    let fields: Record<string, string>;
    try {
      fields = await this.redis.hgetall(this.key(org, session, tool));
    } catch (err) {
      this.log.error({ err }, 'session counters unavailable');
      throw new AppError('service_unavailable', 'Session counters are not answering; retry the call');
    }
    const state =
      Object.keys(fields).length === 0
        ? await loadSessionState(this.store, org, session, tool)
        : stateOf(['1', ...Object.entries(fields).flat()]);
    return evaluateSession(constraints, state, args);
  }

  async reserve(
    org: string,
    session: string,
    tool: string,
    constraints: SessionConstraints,
    args: Record<string, unknown>,
  ): Promise<Reservation> {
    const inc = sessionIncrements(constraints, args);
    // Type and range failures do not depend on the counts: such a call is refused whatever they are.
    const invalid = evaluateSession(constraints, { calls: 0, cumulative: {} }, args).some(
      (f) => f.constraint_type !== 'max_calls' && f.constraint_type !== 'cumulative_limit',
    );
    const limits = constraints.cumulativeLimits ?? [];
    const argv = [
      String(this.ttlMs),
      invalid ? '1' : '0',
      typeof constraints.maxCalls === 'number' ? String(constraints.maxCalls) : '',
      String(limits.length),
      ...limits.flatMap((l) => {
        // Own values only: for an argument named `constructor` that the call lacks, a plain object
        // would give the inherited function.
        const v = Object.hasOwn(inc.cumulative, l.argumentName) ? inc.cumulative[l.argumentName] : undefined;
        return [l.argumentName, String(l.maxValue), v === undefined ? '' : String(v)];
      }),
    ];
    const key = this.key(org, session, tool);
    let reply: ScriptReply;
    try {
      reply = await this.scripts.svcSessionReserve(key, ...argv, '0');
      if (reply[0] === 'init') {
        reply = await this.scripts.svcSessionReserve(
          key,
          ...argv,
          ...(await this.stored(org, session, tool)),
        );
      }
    } catch (err) {
      this.log.error({ err }, 'session counters unavailable');
      throw new AppError('service_unavailable', 'Session counters are not answering; retry the call');
    }
    const before = stateOf(reply);
    // The messages come from the shared evaluator, on the exact state the script saw.
    const failures: FailedConstraint[] = evaluateSession(constraints, before, args);
    if (reply[0] !== 1) {
      return { failures: failures.length > 0 ? failures : [this.refused()], after: null, ...NO_OP };
    }
    const after = counted(before, inc);
    let done = false;
    const release = () => {
      if (done) return;
      done = true;
      const pairs = Object.entries(inc.cumulative).flatMap(([k, v]) => [k, String(v)]);
      this.scripts.svcSessionRelease(key, ...pairs).catch((err) => {
        this.log.error({ err }, 'session counter could not be given back');
      });
    };
    // Both sides use the same arithmetic, so they agree; if they ever did not, refuse (fail closed).
    if (failures.length > 0) {
      release();
      return { failures, after: null, ...NO_OP };
    }
    return {
      failures,
      after,
      release,
      settle: () => {
        done = true;
      },
    };
  }

  private refused(): FailedConstraint {
    return {
      parameter: '',
      constraint_type: 'session_limit',
      expected: 'within the session limits',
      actual: null,
      message: 'session limit reached',
    };
  }
}

const NO_OP = { release: noop, settle: noop };

/**
 * What to tell the operator about Redis's `maxmemory-policy` (null when nothing): under any policy
 * but `noeviction` Redis may drop a session counter (they carry a TTL, so `volatile-*` policies
 * too), and the calls of that session in flight at that moment would not be counted again.
 */
export function evictionWarning(policy: string | null): string | null {
  if (policy === null || policy === 'noeviction') return null;
  return `Redis maxmemory-policy is ${policy}: under memory pressure Redis may evict session counters, and a session's calls in flight at that moment are then not counted against its limits; set maxmemory-policy noeviction (Redis then refuses writes when full, and calls fail closed with 503)`;
}
