/**
 * Whether `work` fulfils within `ms`: true if it does, false once `ms` pass first (it goes on
 * running; the caller decides what to do about it). A rejection before the deadline is passed on.
 */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((r) => {
    timer = setTimeout(() => r(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
