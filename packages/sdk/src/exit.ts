/** The runtime's `process` where it has one with events (Node, Bun): for the flush at exit. */
interface ProcessEvents {
  on(event: 'beforeExit', listener: () => void): unknown;
  off?(event: 'beforeExit', listener: () => void): unknown;
}

const hooks = new Set<() => void>();
const runHooks = () => {
  for (const hook of [...hooks]) hook();
};

/**
 * Runs `hook` when the process is about to exit because nothing is left to do (Node's beforeExit;
 * not on an explicit exit or a signal, and never where the runtime has no such event). Work the
 * hook starts keeps the process alive as any work does. One listener however many hooks. Answers
 * the unregistering.
 */
export function atExit(hook: () => void): () => void {
  const proc = (globalThis as { process?: Partial<ProcessEvents> }).process;
  if (typeof proc?.on !== 'function') return () => {};
  if (hooks.size === 0) proc.on('beforeExit', runHooks);
  hooks.add(hook);
  return () => {
    if (hooks.delete(hook) && hooks.size === 0) proc.off?.('beforeExit', runHooks);
  };
}
