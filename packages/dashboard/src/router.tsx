import { type MouseEvent, type ReactNode, useEffect, useState } from 'react';

/** The current path, kept in step with history navigation (links below and the back button). */
export function usePath(): string {
  const [path, setPath] = useState(() => window.location.pathname);
  useEffect(() => {
    const onPop = () => setPath(window.location.pathname);
    window.addEventListener('popstate', onPop);
    return () => window.removeEventListener('popstate', onPop);
  }, []);
  return path;
}

/** Moves to a dashboard path without reloading the page. */
export function navigate(to: string): void {
  if (to === window.location.pathname + window.location.search) return;
  window.history.pushState(null, '', to);
  window.dispatchEvent(new PopStateEvent('popstate'));
}

/** A link that navigates in place; modified clicks (new tab, new window) keep the browser's default. */
export function Link({ to, children, current }: { to: string; children: ReactNode; current?: boolean }) {
  const onClick = (e: MouseEvent<HTMLAnchorElement>) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return (
    <a href={to} onClick={onClick} aria-current={current ? 'page' : undefined}>
      {children}
    </a>
  );
}
