import { Fragment } from 'react';
import { type Inspection, type JsonView, jsonPieces, type Piece, reveal } from './reveal.js';

/** Pieces of revealed text: what replaces the original (an escape, a count) is marked. */
function Pieces({ pieces }: { pieces: Piece[] }) {
  return (
    <>
      {pieces.map((p, i) =>
        p.kind ? (
          // The pieces of one text, in order: their position is their identity.
          // biome-ignore lint/suspicious/noArrayIndexKey: see above
          <span key={i} className={`esc ${p.kind}`} data-revealed={p.kind}>
            {p.text}
          </span>
        ) : (
          // biome-ignore lint/suspicious/noArrayIndexKey: see above
          <Fragment key={i}>{p.text}</Fragment>
        ),
      )}
    </>
  );
}

/**
 * Text an agent (or anyone but this page) supplied, as it really is: invisible characters escaped,
 * long runs of spaces counted. `multiline` keeps line breaks and tabs.
 */
export function Shown({ text, multiline = false }: { text: string | null | undefined; multiline?: boolean }) {
  if (!text) return null;
  return <Pieces pieces={reveal(text, { multiline }).pieces} />;
}

/** Parsed JSON on one line, its strings and keys revealed (for table cells). */
export function CompactJson({ value }: { value: unknown }) {
  return <Pieces pieces={jsonPieces(value, { indent: 0 }).pieces} />;
}

/**
 * Arguments (or any JSON) in a block that wraps, keeps every character visible and scrolls within a
 * capped height, so the buttons after it stay within reach. Pass the view to share its warnings.
 */
export function JsonBlock({
  value,
  view = jsonPieces(value),
  label,
  ...rest
}: {
  value?: unknown;
  view?: JsonView;
  /** The block's accessible name: it is focusable, so that it scrolls from the keyboard. */
  label: string;
  'data-receipt'?: boolean;
}) {
  return (
    // A scrollable region must be reachable from the keyboard, and named.
    // biome-ignore lint/a11y/noNoninteractiveTabindex: see above
    // biome-ignore lint/a11y/useSemanticElements: a fieldset is for form controls, this is text
    <pre className="json" role="group" tabIndex={0} aria-label={label} {...rest}>
      <Pieces pieces={view.pieces} />
    </pre>
  );
}

/**
 * What a person must know before trusting what a card shows: invisible characters, long runs of
 * spaces and long values, each said once. Nothing when there is none.
 */
export function Warnings({ found, long = [] }: { found: Partial<Inspection>; long?: JsonView['long'] }) {
  if (!found.hidden && !found.spaces && long.length === 0) return null;
  return (
    <ul className="warn" data-warnings>
      {found.hidden && (
        <li data-hidden-chars>
          Contains invisible characters, shown here as {'\\u202E'} and the like: the text may read differently
          elsewhere.
        </li>
      )}
      {found.spaces && <li data-space-runs>Contains long runs of spaces, shown here as ⟨N spaces⟩.</li>}
      {long.map((l) => (
        <li key={l.path} data-long-value>
          Long value: <Shown text={l.path} /> has {l.length.toLocaleString('en-US')} characters; read it to
          the end.
        </li>
      ))}
    </ul>
  );
}
