import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { coalesce, liveText, POLL_MS } from './live.js';

describe('folding a burst of events into few reads', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('runs at once, then at most once per gap, however many calls come', () => {
    const run = vi.fn();
    const c = coalesce(run, 1000);
    c.call();
    expect(run).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 1000; i++) c.call();
    expect(run).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(999);
    expect(run).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(1);
    expect(run).toHaveBeenCalledTimes(2);
    // Nothing more was asked: nothing more runs.
    vi.advanceTimersByTime(5000);
    expect(run).toHaveBeenCalledTimes(2);
    // Long after the last run, a call runs at once again.
    c.call();
    expect(run).toHaveBeenCalledTimes(3);
  });

  it('waits only what is left of the gap, and runs nothing once cancelled', () => {
    const run = vi.fn();
    const c = coalesce(run, 1000);
    c.call();
    vi.advanceTimersByTime(600);
    c.call();
    vi.advanceTimersByTime(400);
    expect(run).toHaveBeenCalledTimes(2);
    c.call();
    c.cancel();
    vi.advanceTimersByTime(5000);
    expect(run).toHaveBeenCalledTimes(2);
  });
});

describe('the status of a live page', () => {
  it('says live, polling (how often) or connecting', () => {
    expect(liveText('live')).toBe('Live');
    expect(liveText('polling')).toBe(`Refreshing every ${POLL_MS / 1000} s`);
    expect(POLL_MS).toBe(15_000);
    expect(liveText('connecting')).toBe('Connecting…');
  });
});
