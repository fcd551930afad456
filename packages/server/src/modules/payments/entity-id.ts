import { gatewayError } from './model.js';

/** Characters no entity id holds: controls, format characters (invisible), line and paragraph separators, lone surrogates. */
const FORBIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}]/u;
/** White space at either end (JavaScript's `\s`: Unicode white space, U+FEFF included). */
const EDGE_SPACE = /^\s|\s$/u;

/**
 * Why `id` cannot name an entity, or null when it can. Entity ids are compared exactly (case and
 * all): entity caps sum the spend of one exact id. So an id may not differ from another only by what
 * a reader cannot see: white space around it, control or format characters (zero-width spaces, bidi
 * marks, soft hyphens…), or another Unicode normalization form of the same text (it must be NFC).
 */
export function entityIdProblem(id: string): string | null {
  if (EDGE_SPACE.test(id)) return 'must not start or end with white space';
  const bad = FORBIDDEN.exec(id);
  if (bad) {
    const cp = bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    return `must not contain control or format characters, line separators or lone surrogates (U+${cp})`;
  }
  if (id.normalize('NFC') !== id) return 'must be in Unicode normalization form C (NFC)';
  return null;
}

/** Refuses (400 invalid_request, `param` naming the member) an id `entityIdProblem` refuses. */
export function checkEntityId(id: string, param = 'entity_id'): void {
  const problem = entityIdProblem(id);
  if (problem !== null) {
    throw gatewayError.invalidRequest(
      `${param} ${problem}: entity ids are compared exactly, and entity caps count per exact id`,
      param,
    );
  }
}
