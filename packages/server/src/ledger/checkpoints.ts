import type { Kysely } from 'kysely';
import type { Clock } from '../lib/clock.js';
import { type Signature, SigningKeyMissingError } from '../signing/model.js';
import type { CheckpointsTable, Database } from '../storage/schema.js';
import { canonicalJson, tagDigest } from './canonical.js';
import { MerkleFrontier } from './merkle.js';

export const CHECKPOINT_SCHEMA = 'svc.checkpoint/1';

/**
 * A signed tree head of one organization's receipt chain, in the manner of Certificate
 * Transparency: the RFC 6962 root over the first `tree_size` receipts and the hash of the last of
 * them, signed with the service's Ed25519 key. Signed bytes: the RFC 8785 canonical JSON of every
 * field except `signature`.
 */
export interface Checkpoint {
  schema: typeof CHECKPOINT_SCHEMA;
  /** SVC_BASE_URL of the service that signed it (stored with it: a later change of the URL keeps it). */
  origin: string;
  organization_id: string;
  tree_size: number;
  root_hash: string;
  last_receipt_hash: string;
  timestamp: string;
  kid: string;
  signature: string;
}

export type UnsignedCheckpoint = Omit<Checkpoint, 'signature'>;

/** The exact bytes a checkpoint signature covers. */
export function checkpointSigningInput(c: UnsignedCheckpoint | Checkpoint): Uint8Array {
  const { signature: _s, ...unsigned } = c as Checkpoint;
  return new TextEncoder().encode(canonicalJson(unsigned));
}

export interface CheckpointSigner {
  signNaming(build: (kid: string) => Uint8Array): Promise<Signature>;
  /** The kid that signs now, or null when no key loads. */
  activeKid(): Promise<string | null>;
  /** Whether `kid` is a key that no longer signs (a rotation retired it). */
  isRetired(kid: string): Promise<boolean>;
}

/**
 * A stored checkpoint as it was signed. `origin` is covered by the signature, so it comes from the
 * row; rows signed before migration 0023 did not record theirs and get `currentOrigin` (this
 * instance's SVC_BASE_URL), which verifies only if the base URL has not changed since they were signed.
 */
function fromRow(currentOrigin: string, r: CheckpointsTable): Checkpoint {
  return {
    schema: CHECKPOINT_SCHEMA,
    origin: r.origin ?? currentOrigin,
    organization_id: r.organization_id,
    tree_size: Number(r.tree_size),
    root_hash: r.root_hash,
    last_receipt_hash: r.last_receipt_hash,
    timestamp: r.timestamp,
    kid: r.kid,
    signature: r.signature,
  };
}

export interface CheckpointerOptions {
  db: Kysely<Database>;
  signer: CheckpointSigner;
  clock: Clock;
  origin: string;
  /** How often grown chains get a new checkpoint; 0 disables the timer (checkpoints on demand and at close). */
  intervalMs: number;
  log?: { warn(obj: object, msg: string): void };
}

/**
 * After the first scan for retired keys' checkpoints under a signing key, one more this long later:
 * other instances go on signing with the key a rotation retired until they read the key set again
 * (every 10 s), and a chain that then stops growing would keep the checkpoint one of them signed.
 */
export const RESCAN_AFTER_MS = 60_000;

/**
 * Writes a checkpoint of every chain that grew since its last one, every `intervalMs` and once more
 * at shutdown, and on demand. Several instances on one database may sign the same tree size: the
 * first row stays, and both signatures would verify. A chain whose newest checkpoint was signed by a
 * key a rotation retired is signed again at the same size with the current key, and that checkpoint
 * replaces the stored one (same root and last receipt): a chain that stopped growing would otherwise
 * keep only checkpoints that stop verifying once the retired key leaves the published set.
 */
export class Checkpointer {
  private timer: NodeJS.Timeout | null = null;
  /** The signing key the last complete scan for retired keys' checkpoints was made under. */
  private scannedFor: string | null = null;
  /** When the scan under `scannedFor` is made once more (null: it was). */
  private rescanAt: number | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly opts: CheckpointerOptions) {}

  start(): void {
    if (this.opts.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.opts.intervalMs);
    this.timer.unref();
  }

  /** Stops the timer, then checkpoints what was written up to now (call after the writer drained). */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // A timer pass under way may have read the chain heads before the last decisions: let it end,
    // then make the final pass, so the last checkpoint covers everything acknowledged.
    await this.running;
    await this.tick();
  }

  /** One pass over the chains that grew; never throws (a failure is logged and retried next pass). */
  tick(): Promise<void> {
    this.running ??= this.pass()
      .catch((err) => this.opts.log?.warn({ err }, 'checkpoint pass failed; retrying at the next interval'))
      .finally(() => {
        this.running = null;
      });
    return this.running;
  }

  private async pass(): Promise<void> {
    const { db } = this.opts;
    const grown = await db
      .selectFrom('chain_heads as h')
      .select(['h.organization_id', 'h.sequence', 'h.last_hash', 'h.frontier'])
      .where('h.sequence', '>', (eb) =>
        eb.fn.coalesce(
          eb
            .selectFrom('checkpoints as c')
            .select((e) => e.fn.max('c.tree_size').as('m'))
            .whereRef('c.organization_id', '=', 'h.organization_id'),
          eb.lit(0),
        ),
      )
      .execute();
    for (const head of grown) await this.signHead(head);
    await this.resignRetired();
  }

  /**
   * Signs again, with the current key, every chain head whose checkpoint a retired key signed. Once
   * per signing key this process learns (at start and after each rotation it picks up), and once more
   * RESCAN_AFTER_MS later, for what other instances signed before they picked the rotation up: this
   * process signs nothing with a retired key after the first scan.
   */
  private async resignRetired(): Promise<void> {
    const { db, signer } = this.opts;
    const active = await signer.activeKid();
    if (active === null) return;
    const now = this.opts.clock.now().getTime();
    const first = active !== this.scannedFor;
    if (!first && (this.rescanAt === null || now < this.rescanAt)) return;
    const stale = await db
      .selectFrom('chain_heads as h')
      .innerJoin('checkpoints as c', (j) =>
        j.onRef('c.organization_id', '=', 'h.organization_id').onRef('c.tree_size', '=', 'h.sequence'),
      )
      .select(['h.organization_id', 'h.sequence', 'h.last_hash', 'h.frontier', 'c.kid'])
      .where('c.kid', '<>', active)
      .execute();
    const retired = new Map<string, boolean>();
    for (const { kid, ...head } of stale) {
      if (!retired.has(kid)) retired.set(kid, await signer.isRetired(kid));
      if (retired.get(kid)) await this.signHead(head, kid);
    }
    this.scannedFor = active;
    this.rescanAt = first ? now + RESCAN_AFTER_MS : null;
  }

  /** Whether a stored checkpoint was signed by a key that no longer signs (it is then signed again). */
  async superseded(checkpoint: Checkpoint): Promise<boolean> {
    return this.opts.signer.isRetired(checkpoint.kid);
  }

  /**
   * Signs the head and stores the checkpoint unless one of that size is stored already (another
   * request, the timer or another instance signed it first): then that one is returned, with
   * `created: false`, since the checkpoint signed here was discarded. With `replacing` (the kid of
   * the stored checkpoint of that size, signed by a retired key), the new one takes its place, unless
   * another signer replaced it first.
   */
  private async signHead(
    head: {
      organization_id: string;
      sequence: number;
      last_hash: string;
      frontier: string;
    },
    replacing?: string,
  ): Promise<{ checkpoint: Checkpoint; created: boolean }> {
    const size = Number(head.sequence);
    const root = MerkleFrontier.fromTagged(JSON.parse(head.frontier) as string[], size).root();
    const unsigned = {
      schema: CHECKPOINT_SCHEMA,
      origin: this.opts.origin,
      organization_id: head.organization_id,
      tree_size: size,
      root_hash: tagDigest(root),
      last_receipt_hash: head.last_hash,
      timestamp: this.opts.clock.now().toISOString(),
    } as const;
    const { kid, signature } = await this.opts.signer.signNaming((k) =>
      checkpointSigningInput({ ...unsigned, kid: k }),
    );
    const checkpoint: Checkpoint = { ...unsigned, kid, signature };
    // What is stored of it beside its key (organization, tree size).
    const signed = {
      root_hash: checkpoint.root_hash,
      last_receipt_hash: checkpoint.last_receipt_hash,
      timestamp: checkpoint.timestamp,
      kid,
      signature,
      origin: checkpoint.origin,
    };
    if (replacing !== undefined) {
      const replaced = await this.opts.db
        .updateTable('checkpoints')
        .set(signed)
        .where('organization_id', '=', checkpoint.organization_id)
        .where('tree_size', '=', size)
        .where('kid', '=', replacing)
        .returning('tree_size')
        .executeTakeFirst();
      if (replaced) return { checkpoint, created: true };
    }
    // RETURNING yields the row only when this insert stored it (SQLite and PostgreSQL alike).
    const stored = await this.opts.db
      .insertInto('checkpoints')
      .values({ organization_id: checkpoint.organization_id, tree_size: size, ...signed })
      .onConflict((oc) => oc.columns(['organization_id', 'tree_size']).doNothing())
      .returning('tree_size')
      .executeTakeFirst();
    if (stored) return { checkpoint, created: true };
    const first = await this.at(head.organization_id, size);
    if (!first) throw new Error(`checkpoint ${head.organization_id}/${size} was neither stored nor found`);
    return { checkpoint: first, created: false };
  }

  /**
   * A checkpoint covering the chain as it is now: the one of its current size if there is one
   * (`created: false`), else a new one signed here (`created: true`, only when this call's checkpoint
   * is the one stored; one stored first by a concurrent signer is returned with `created: false`).
   * One of the current size signed by a retired key is replaced by one signed here, as a new one
   * (kept as it is while no key can sign). Null when the chain is empty.
   * Throws SigningKeyMissingError when a new one is needed and no key loads.
   */
  async now(organizationId: string): Promise<{ checkpoint: Checkpoint; created: boolean } | null> {
    const head = await this.opts.db
      .selectFrom('chain_heads')
      .select(['organization_id', 'sequence', 'last_hash', 'frontier'])
      .where('organization_id', '=', organizationId)
      .executeTakeFirst();
    if (!head || Number(head.sequence) === 0) return null;
    const existing = await this.at(organizationId, Number(head.sequence));
    if (!existing) return this.signHead(head);
    if (!(await this.superseded(existing))) return { checkpoint: existing, created: false };
    try {
      return await this.signHead(head, existing.kid);
    } catch (err) {
      // Nothing signs right now: the stored one is still what covers the chain.
      if (err instanceof SigningKeyMissingError) return { checkpoint: existing, created: false };
      throw err;
    }
  }

  async at(organizationId: string, treeSize: number): Promise<Checkpoint | null> {
    const row = await this.opts.db
      .selectFrom('checkpoints')
      .selectAll()
      .where('organization_id', '=', organizationId)
      .where('tree_size', '=', treeSize)
      .executeTakeFirst();
    return row ? fromRow(this.opts.origin, row) : null;
  }

  /** Newest first; `beforeSize` pages back. */
  async list(organizationId: string, limit: number, beforeSize?: number): Promise<Checkpoint[]> {
    let q = this.opts.db
      .selectFrom('checkpoints')
      .selectAll()
      .where('organization_id', '=', organizationId)
      .orderBy('tree_size', 'desc')
      .limit(limit);
    if (beforeSize !== undefined) q = q.where('tree_size', '<', beforeSize);
    return (await q.execute()).map((r) => fromRow(this.opts.origin, r));
  }
}
