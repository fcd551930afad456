/** Time source passed into services so tests can move time without sleeping. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** Rounds milliseconds to microseconds: enough precision, stable JSON. */
export const roundMs = (ms: number) => Math.round(ms * 1000) / 1000;
