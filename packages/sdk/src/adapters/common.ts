import type { ApprovalWaitOptions, CallContext } from '../model.js';

/** Options every adapter takes. */
export interface GuardOptions<Extra = unknown> {
  /** Context sent with each call (session_id, agent_id...), or a function of the call. */
  context?: CallContext | ((args: Record<string, unknown>, extra: Extra) => CallContext | undefined);
  /** How long to wait for a person when a call needs approval. */
  approval?: ApprovalWaitOptions;
}

export function contextOf<Extra>(
  options: GuardOptions<Extra>,
  args: Record<string, unknown>,
  extra: Extra,
): CallContext | undefined {
  return typeof options.context === 'function' ? options.context(args, extra) : options.context;
}

/** Tool inputs are objects; anything else is validated as `{}`-less input and refused by the server. */
export const asArgs = (input: unknown): Record<string, unknown> => (input ?? {}) as Record<string, unknown>;
